import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MALFORMED_LIMITS } from "./malformed.ts";
import { parseRequest, type ParseResult, type Request } from "../../../../src/adapters/mqtt/requests.ts";
import { REQUEST_VERBS, type RequestVerb } from "../../../../packages/protocol/src/topics.ts";

const LIMITS = MALFORMED_LIMITS;
const RUNS = { numRuns: 1000 };
const MAX = Number.MAX_SAFE_INTEGER;
const FIELDS: Record<RequestVerb, readonly string[]> = {
  "lease/acquire": ["id", "holder", "ttlMs"],
  "lease/renew": ["id", "holder", "token"],
  "lease/release": ["id", "holder", "token"],
  command: ["id", "holder", "token", "seq", "set", "deadlineMs"],
  read: ["id", "holder"],
};

function parse(verb: RequestVerb, payload: Uint8Array | string, retain = false, responseTopic?: string): ParseResult {
  return parseRequest({
    base: "fencegate",
    actuator: "valve-1",
    verb,
    payload: typeof payload === "string" ? Buffer.from(payload, "utf8") : payload,
    retain,
    responseTopic,
    limits: LIMITS,
  });
}

const verbArb = fc.constantFrom(...REQUEST_VERBS);
const idArb = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 128 });
const holderArb = fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/);
const pointArb = fc.stringMatching(/^[A-Za-z0-9_.-]{1,64}$/).filter((k) => !(k in Object.prototype));
const valueArb = fc.double({ noNaN: true, noDefaultInfinity: true }).map((v) => (Object.is(v, -0) ? 0 : v));

/** Any valid request, with how it should come back (deadline defaulted). */
interface Valid {
  verb: RequestVerb;
  body: Record<string, unknown>;
  expected: Request;
}
/** Authenticated actuators' MAC: optional on renew, release and command; and the counter of renew and release. */
const macArb = fc.stringMatching(/^[0-9a-f]{64}$/);
const validArb: fc.Arbitrary<Valid> = verbArb.chain((verb): fc.Arbitrary<Valid> => {
  switch (verb) {
    case "lease/acquire":
      return fc.record({ id: idArb, holder: holderArb, ttlMs: fc.integer({ min: LIMITS.minTtlMs, max: LIMITS.maxTtlMs }) }).map((b) => ({
        verb,
        body: b,
        expected: { verb, actuator: "valve-1", ...b },
      }));
    case "lease/renew":
    case "lease/release":
      return fc
        .record(
          { id: idArb, holder: holderArb, token: fc.integer({ min: 1, max: MAX }), mac: macArb, counter: fc.integer({ min: 1, max: MAX }) },
          { requiredKeys: ["id", "holder", "token"] },
        )
        .map((b) => ({
          verb,
          body: b,
          expected: { verb, actuator: "valve-1", ...b, mac: b.mac ?? null, counter: b.counter ?? null },
        }));
    case "command":
      return fc
        .record(
          {
            id: idArb,
            holder: holderArb,
            token: fc.integer({ min: 1, max: MAX }),
            seq: fc.integer({ min: 0, max: MAX }),
            set: fc.dictionary(pointArb, valueArb, { minKeys: 1, maxKeys: 64 }),
            deadlineMs: fc.integer({ min: 1, max: LIMITS.maxDeadlineMs }),
            mac: macArb,
          },
          { requiredKeys: ["id", "holder", "token", "seq", "set"] },
        )
        .map((b) => ({
          verb,
          body: b,
          expected: { verb, actuator: "valve-1", deadlineMs: LIMITS.defaultDeadlineMs, ...b, mac: b.mac ?? null },
        }));
    case "read":
      return fc.record({ id: idArb, holder: holderArb }, { requiredKeys: ["id"] }).map((b) => ({
        verb,
        body: b,
        expected: { verb, actuator: "valve-1", holder: null, ...b },
      }));
  }
});

function wellFormed(r: ParseResult): void {
  expect(["request", "refused", "unanswerable"]).toContain(r.kind);
  if (r.kind === "refused") {
    expect(r.message.length).toBeGreaterThan(0);
    expect(r.message).not.toMatch(/[\n\r]/);
  }
}

describe("properties", () => {
  it("never throws on arbitrary bytes", () => {
    fc.assert(
      fc.property(verbArb, fc.uint8Array({ maxLength: 4096 }), fc.boolean(), (verb, bytes, retain) => {
        wellFormed(parse(verb, bytes, retain));
      }),
      RUNS,
    );
  });

  it("never throws on arbitrary JSON values", () => {
    fc.assert(
      fc.property(verbArb, fc.jsonValue(), fc.option(fc.string(), { nil: undefined }), (verb, value, rt) => {
        wellFormed(parse(verb, JSON.stringify(value), false, rt));
      }),
      RUNS,
    );
  });

  it("never throws, and always answers, on arbitrary objects carrying a valid id and holder", () => {
    fc.assert(
      fc.property(verbArb, idArb, holderArb, fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 8 }), (verb, id, holder, rest) => {
        const entries = Object.entries(rest).filter(([k]) => k !== "id" && k !== "holder");
        const text = `{${[["id", id], ["holder", holder], ...entries].map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`;
        const r = parse(verb, text);
        wellFormed(r);
        if (Buffer.byteLength(text) <= LIMITS.maxPayloadBytes) expect(r.kind).not.toBe("unanswerable");
      }),
      RUNS,
    );
  });

  it("every valid request round-trips", () => {
    fc.assert(
      fc.property(validArb, ({ verb, body, expected }) => {
        const r = parse(verb, JSON.stringify(body));
        expect(r.kind).toBe("request");
        if (r.kind === "request") expect(r.request).toEqual(expected);
      }),
      RUNS,
    );
  });

  it("every valid request published retained is refused with RETAINED_REQUEST", () => {
    fc.assert(
      fc.property(validArb, ({ verb, body }) => {
        expect(parse(verb, JSON.stringify(body), true)).toMatchObject({ kind: "refused", code: "RETAINED_REQUEST", id: body.id });
      }),
      RUNS,
    );
  });

  it("any extra unknown key is refused with INVALID_REQUEST naming it", () => {
    fc.assert(
      fc.property(
        validArb,
        fc.oneof(fc.string(), fc.constantFrom("__proto__", "constructor", "prototype", "toString", "ID", "Token")),
        fc.jsonValue(),
        ({ verb, body }, key, value) => {
          fc.pre(!FIELDS[verb].includes(key));
          const text = JSON.stringify(body);
          const r = parse(verb, `${text.slice(0, -1)},${JSON.stringify(key)}:${JSON.stringify(value)}}`);
          expect(r).toMatchObject({ kind: "refused", code: "INVALID_REQUEST", id: body.id });
          if (r.kind === "refused") expect(r.message).toMatch(/^unknown field "/);
        },
      ),
      RUNS,
    );
  });

  it("a token is accepted exactly when its literal is a plain integer from 1 to 2^53-1", () => {
    const literal = fc
      .tuple(
        fc.constantFrom("", "-"),
        fc.oneof(
          fc.constant("0"),
          fc.stringMatching(/^[1-9][0-9]{0,24}$/),
          fc.constantFrom("9007199254740991", "9007199254740992", "9007199254740993"),
        ),
        fc.option(fc.stringMatching(/^\.[0-9]{1,5}$/), { nil: "" }),
        fc.option(fc.stringMatching(/^[eE][+-]?[0-9]{1,3}$/), { nil: "" }),
      )
      .map((parts) => parts.join(""));
    fc.assert(
      fc.property(literal, (lit) => {
        const r = parse("lease/renew", `{"id":"r","holder":"h","token":${lit}}`);
        const plain = /^(0|[1-9][0-9]*)$/.test(lit);
        const ok = plain && BigInt(lit) >= 1n && BigInt(lit) <= BigInt(MAX);
        expect(r.kind).toBe(ok ? "request" : "refused");
        if (r.kind === "request" && r.request.verb === "lease/renew") expect(BigInt(r.request.token)).toBe(BigInt(lit));
        if (r.kind === "refused") expect(r.message).toBe(`token must be an integer from 1 to ${MAX}`);
      }),
      RUNS,
    );
  });
});
