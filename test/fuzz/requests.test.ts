/**
 * Fuzzing the request edge (src/adapters/mqtt/requests.ts) with near-valid requests:
 * test/mqtt-edge covers arbitrary bytes, arbitrary JSON, extra keys and token literals;
 * here valid requests are mutated the ways a buggy or hostile controller writes them.
 *
 *  - a mutation that breaks one field (wrong type, out of range, non-plain integer literal,
 *    overflowing number, a broken `set`, the field missing, written twice, its name a near
 *    miss) is refused with INVALID_REQUEST, answered (id and route intact), never accepted;
 *  - a mutation that changes nothing JSON means (whitespace, key order, \u escapes) parses
 *    to exactly what the original does;
 *  - byte-level damage (flips, insertions, deletions, splices) never throws, and whatever is
 *    accepted satisfies every rule of the contract, checked here independently;
 *  - an arbitrary v5 Response Topic is used only if it can be published to.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseRequest, type ParseResult } from "../../src/adapters/mqtt/requests.ts";
import { REQUEST_VERBS, type RequestVerb } from "../../packages/protocol/src/topics.ts";
import { MALFORMED_LIMITS as LIMITS } from "../unit/adapters/mqtt/malformed.ts";
import { FUZZ_TIMEOUT_MS, runs } from "./runs.ts";

const MAX = Number.MAX_SAFE_INTEGER;
const INTEGER_FIELDS: Readonly<Record<string, readonly [number, number]>> = {
  ttlMs: [LIMITS.minTtlMs, LIMITS.maxTtlMs],
  token: [1, MAX],
  seq: [0, MAX],
  deadlineMs: [1, LIMITS.maxDeadlineMs],
};

function parse(verb: RequestVerb, text: string | Uint8Array, responseTopic?: string): ParseResult {
  const payload = typeof text === "string" ? Buffer.from(text, "utf8") : text;
  return parseRequest({ base: "fencegate", actuator: "valve-1", verb, payload, retain: false, responseTopic, limits: LIMITS });
}

const idArb = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 40 });
const holderArb = fc.stringMatching(/^[A-Za-z0-9._:-]{1,40}$/);
const pointArb = fc.stringMatching(/^[A-Za-z0-9_.-]{1,20}$/).filter((k) => !(k in Object.prototype));
const intIn = (f: string) => fc.integer({ min: INTEGER_FIELDS[f]![0], max: INTEGER_FIELDS[f]![1] });

/** A valid request body as an ordered list of [key, value]. */
type Body = [string, unknown][];
type Valid = { verb: RequestVerb; body: Body };
const validArb: fc.Arbitrary<Valid> = fc.constantFrom(...REQUEST_VERBS).chain((verb): fc.Arbitrary<Valid> => {
  switch (verb) {
    case "lease/acquire":
      return fc.tuple(idArb, holderArb, intIn("ttlMs")).map(([id, holder, ttlMs]) => ({
        verb,
        body: [
          ["id", id],
          ["holder", holder],
          ["ttlMs", ttlMs],
        ] as Body,
      }));
    case "lease/renew":
    case "lease/release":
      return fc.tuple(idArb, holderArb, intIn("token")).map(([id, holder, token]) => ({
        verb,
        body: [
          ["id", id],
          ["holder", holder],
          ["token", token],
        ] as Body,
      }));
    case "command":
      return fc
        .tuple(
          idArb,
          holderArb,
          intIn("token"),
          intIn("seq"),
          fc.dictionary(pointArb, fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e6, max: 1e6 }), { minKeys: 1, maxKeys: 4 }),
          fc.option(intIn("deadlineMs"), { nil: undefined }),
        )
        .map(([id, holder, token, seq, set, deadlineMs]) => ({
          verb,
          body: [
            ["id", id],
            ["holder", holder],
            ["token", token],
            ["seq", seq],
            ["set", set],
            ...(deadlineMs !== undefined ? [["deadlineMs", deadlineMs] as [string, unknown]] : []),
          ] as Body,
        }));
    case "read":
      return fc.tuple(idArb, fc.option(holderArb, { nil: undefined })).map(([id, holder]) => ({
        verb,
        body: [["id", id], ...(holder !== undefined ? [["holder", holder] as [string, unknown]] : [])] as Body,
      }));
  }
});

/** Serialises a body, each value given as raw JSON text (so a mutation can write any literal). */
function text(entries: readonly (readonly [string, string])[], ws = ""): string {
  return `{${ws}${entries.map(([k, v]) => `${JSON.stringify(k)}${ws}:${ws}${v}`).join(`${ws},${ws}`)}${ws}}`;
}
const raw = (body: Body): [string, string][] => body.map(([k, v]) => [k, JSON.stringify(v)]);

/** A replacement value (as JSON text) that is wrong for integer field `f`. */
function badInteger(f: string): fc.Arbitrary<string> {
  const [lo, hi] = INTEGER_FIELDS[f]!;
  return fc.oneof(
    fc.integer({ min: lo, max: Math.min(hi, lo + 1000) }).map((n) => [`"${n}"`, `${n}.0`, `${n}e0`, `${n}.5`, `${n * 10}E-1`][n % 5]!),
    fc.constantFrom(
      "null",
      "true",
      "false",
      "[]",
      "{}",
      `[${lo}]`,
      `{"v":${lo}}`,
      "1e999",
      "-1e999",
      `${hi}0`,
      "9007199254740992",
      "18446744073709551616",
    ),
    fc.integer({ min: -1_000_000, max: lo - 1 }).map(String),
    ...(hi < MAX ? [fc.integer({ min: hi + 1, max: hi + 1_000_000 }).map(String)] : []),
    fc
      .double({ noNaN: true, noDefaultInfinity: true })
      .filter((d) => !Number.isInteger(d))
      .map((d) => JSON.stringify(d)),
  );
}

/** A `set` (JSON text) that breaks the contract. */
const badSet = fc.oneof(
  fc.constantFrom(
    "{}",
    "[]",
    "null",
    "1",
    '"position"',
    '{"position":"1"}',
    '{"position":null}',
    '{"position":true}',
    '{"position":[1]}',
    '{"position":{}}',
    '{"position":1e999}',
    '{"":1}',
    '{"a b":1}',
    '{"__proto__":1}',
    '{"constructor":1}',
    '{"toString":1}',
  ),
  fc
    .string({ minLength: 1, maxLength: 10 })
    .filter((k) => !/^[A-Za-z0-9_.-]{1,64}$/.test(k))
    .map((k) => `{${JSON.stringify(k)}:1}`),
  fc.stringMatching(/^[A-Za-z0-9_.-]{65,70}$/).map((k) => `{${JSON.stringify(k)}:1}`),
  fc.integer({ min: 65, max: 80 }).map((n) => JSON.stringify(Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, i])))),
);

/** A near miss of a field's name: what a hand-written controller gets wrong. */
const nearMiss = (k: string) =>
  fc
    .constantFrom(
      k.toUpperCase(),
      k[0]!.toUpperCase() + k.slice(1),
      `${k} `,
      ` ${k}`,
      `${k}\u200b`,
      `${k}s`,
      k.slice(0, -1),
      k.replace(/M/, "_m"),
    )
    .filter((m) => m !== k);

interface Breaking {
  readonly verb: RequestVerb;
  readonly id: string;
  readonly text: string;
  readonly field: string;
  readonly how: string;
}

/** A valid request with exactly one non-routing field broken. */
const breakingArb: fc.Arbitrary<Breaking> = validArb
  .filter(({ body }) => body.some(([k]) => k !== "id" && k !== "holder"))
  .chain(({ verb, body }) => {
    const fields = body.map(([k]) => k).filter((k) => k !== "id" && k !== "holder");
    return fc.tuple(fc.constant({ verb, body }), fc.constantFrom(...fields), fc.constantFrom("value", "missing", "twice", "renamed"));
  })
  .chain(([{ verb, body }, field, how]) => {
    const id = body.find(([k]) => k === "id")![1] as string;
    const entries = raw(body);
    const at = entries.findIndex(([k]) => k === field);
    const optional = field === "deadlineMs";
    const done = (t: string, h: string = how): Breaking => ({ verb, id, text: t, field, how: h });
    if (how === "missing" && !optional) return fc.constant(done(text(entries.filter(([k]) => k !== field))));
    if (how === "twice") return fc.constant(done(text([...entries, [field, entries[at]![1]]])));
    if (how === "renamed")
      return nearMiss(field).map((m) =>
        done(text(entries.map(([k, v], i) => (i === at ? [m, v] : [k, v]))), `renamed to ${JSON.stringify(m)}`),
      );
    const bad = field === "set" ? badSet : badInteger(field);
    return bad.map((v) => done(text(entries.map(([k, old], i) => (i === at ? [k, v] : [k, old]))), `value ${v.slice(0, 40)}`));
  });

/** Every rule the contract sets for an accepted request, checked from the parsed JSON, independently of the parser. */
function satisfiesContract(verb: RequestVerb, payload: Uint8Array): string | null {
  let obj: Record<string, unknown>;
  try {
    obj = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload)) as Record<string, unknown>;
  } catch {
    return "accepted a payload that is not UTF-8 JSON";
  }
  const allowed: Record<RequestVerb, string[]> = {
    "lease/acquire": ["id", "holder", "ttlMs"],
    "lease/renew": ["id", "holder", "token", "mac"],
    "lease/release": ["id", "holder", "token", "mac"],
    command: ["id", "holder", "token", "seq", "set", "deadlineMs", "mac"],
    read: ["id", "holder"],
  };
  for (const k of Object.keys(obj)) if (!allowed[verb].includes(k)) return `accepted unknown field ${k}`;
  if (typeof obj.id !== "string" || !/^[\x20-\x7e]{1,128}$/.test(obj.id)) return "accepted a bad id";
  if (verb !== "read" || "holder" in obj)
    if (typeof obj.holder !== "string" || !/^[A-Za-z0-9._:-]{1,128}$/.test(obj.holder)) return "accepted a bad holder";
  for (const [f, [lo, hi]] of Object.entries(INTEGER_FIELDS)) {
    if (!(f in obj)) continue;
    const v = obj[f];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < lo || v > hi) return `accepted ${f}=${String(v)}`;
  }
  if (verb === "command") {
    const set = obj.set as Record<string, unknown>;
    if (typeof set !== "object" || set === null || Array.isArray(set)) return "accepted a set that is not an object";
    const keys = Object.keys(set);
    if (keys.length < 1 || keys.length > 64) return `accepted a set of ${keys.length} points`;
    for (const k of keys) {
      if (!/^[A-Za-z0-9_.-]{1,64}$/.test(k) || k in Object.prototype) return `accepted point name ${k}`;
      if (typeof set[k] !== "number" || !Number.isFinite(set[k])) return `accepted point value ${String(set[k])}`;
    }
  }
  return null;
}

describe("near-valid requests under fuzzing", () => {
  it(
    "one broken field: refused with INVALID_REQUEST, answered to the request's id, never accepted",
    () => {
      fc.assert(
        fc.property(breakingArb, fc.boolean(), (b, v5) => {
          const r = parse(b.verb, b.text, v5 ? "replies/fuzz" : undefined);
          expect(r, `${b.verb} ${b.field} ${b.how}: ${b.text}`).toMatchObject({ kind: "refused", code: "INVALID_REQUEST", id: b.id });
          if (r.kind === "refused") {
            expect(r.message).not.toMatch(/[\n\r]/);
            // It names what is wrong: the field, or the near-miss name that is not a field.
            if (!b.how.startsWith("renamed")) expect(r.message, `${b.how}: ${r.message}`).toMatch(new RegExp(`${b.field}|set|point`));
          }
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "whitespace, key order and \\u escapes change nothing",
    () => {
      const escape = (s: string, mask: number) =>
        [...s]
          .map((ch, i) =>
            (mask >> (i % 30)) & 1 ? `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}` : JSON.stringify(ch).slice(1, -1),
          )
          .join("");
      fc.assert(
        fc.property(
          validArb,
          fc.constantFrom("", " ", "\t", "\n", "\r\n ", "  \t"),
          fc.integer({ min: 0, max: 2 ** 30 - 1 }),
          fc.func(fc.integer()),
          ({ verb, body }, ws, mask, order) => {
            const original = parse(verb, text(raw(body)));
            expect(original.kind).toBe("request");
            const shuffled = [...raw(body)].sort((a, b) => order(a[0]) - order(b[0]));
            const escaped = shuffled.map(([k, v]): [string, string] => [
              k,
              v.startsWith('"') ? `"${escape(JSON.parse(v) as string, mask)}"` : v,
            ]);
            const t = `{${ws}${escaped.map(([k, v]) => `"${escape(k, mask >> 3)}"${ws}:${ws}${v}`).join(`${ws},${ws}`)}${ws}}`;
            expect(parse(verb, t)).toEqual(original);
          },
        ),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "byte-level damage never throws, and anything accepted keeps every rule of the contract",
    () => {
      const damage = fc.array(
        fc.tuple(
          fc.constantFrom("flip", "insert", "delete", "splice"),
          fc.nat(),
          fc.integer({ min: 0, max: 255 }),
          fc.constantFrom('"', "{", "}", ",", ":", "-", "0", "1e9", "\\", "\\u0000", "null", "[", "]", ".5", "\u00e9", "\ud83d"),
        ),
        { minLength: 1, maxLength: 4 },
      );
      fc.assert(
        fc.property(validArb, damage, fc.boolean(), ({ verb, body }, edits, v5) => {
          let bytes = Buffer.from(text(raw(body)), "utf8");
          for (const [op, at, byte, piece] of edits) {
            const i = at % (bytes.length + 1);
            if (op === "flip" && bytes.length > 0) bytes[i % bytes.length] = byte;
            else if (op === "insert") bytes = Buffer.concat([bytes.subarray(0, i), Buffer.from([byte]), bytes.subarray(i)]);
            else if (op === "delete") bytes = Buffer.concat([bytes.subarray(0, i), bytes.subarray(i + 1)]);
            else bytes = Buffer.concat([bytes.subarray(0, i), Buffer.from(piece, "utf8"), bytes.subarray(i)]);
          }
          const r = parse(verb, bytes, v5 ? "replies/fuzz" : undefined);
          expect(["request", "refused", "unanswerable"]).toContain(r.kind);
          if (r.kind === "request") expect(satisfiesContract(verb, bytes), bytes.toString("latin1")).toBe(null);
          if (r.kind === "refused") expect(r.message).toMatch(/^[^\n\r]+$/);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "a Response Topic is replied to only if it can be published to; otherwise the holder's topic or no reply",
    () => {
      const topicArb = fc.oneof(
        fc.string({ maxLength: 30 }),
        fc.constantFrom("", "#", "+", "a/#", "a/+/b", "a/b#", "\u0000", "a\u0000b", "/", "//", "$SYS/x", "a/".repeat(20)),
      );
      fc.assert(
        fc.property(validArb, topicArb, ({ verb, body }, topic) => {
          const r = parse(verb, text(raw(body)), topic);
          expect(r.kind).not.toBe("unanswerable");
          if (r.kind === "unanswerable") return;
          if (r.route.kind === "responseTopic") {
            expect(r.route.responseTopic).toBe(topic);
            expect(topic.length).toBeGreaterThan(0);
            expect(topic).not.toMatch(/[+#\u0000]/);
          } else {
            expect(r.route.holderTopic).toMatch(/^fencegate\/valve-1\/reply\/[A-Za-z0-9._:_-]+$/);
          }
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});
