import { describe, expect, it } from "vitest";
import { MALFORMED_LIMITS } from "./malformed.ts";
import { MAX_CORRELATION_DATA_BYTES, parseRequest, type IncomingRequest } from "../../../../src/adapters/mqtt/requests.ts";
import type { RequestVerb } from "../../../../packages/protocol/src/topics.ts";

const LIMITS = MALFORMED_LIMITS;
const MAX = "9007199254740991";

function parse(verb: RequestVerb, payload: string | Buffer, extra: Partial<IncomingRequest> = {}) {
  return parseRequest({
    base: "fencegate",
    actuator: "valve-1",
    verb,
    payload: typeof payload === "string" ? Buffer.from(payload) : payload,
    retain: false,
    limits: LIMITS,
    ...extra,
  });
}
const holderRoute = { kind: "holderTopic", holderTopic: "fencegate/valve-1/reply/ctl-a" };

describe("valid requests", () => {
  it.each([
    [
      "lease/acquire, every field echoed",
      "lease/acquire",
      '{"id":"r-1","holder":"ctl-a","ttlMs":5000}',
      { verb: "lease/acquire", actuator: "valve-1", id: "r-1", holder: "ctl-a", ttlMs: 5000 },
    ],
    ["lease/acquire at the lower ttl bound", "lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":1000}', { ttlMs: 1000 }],
    ["lease/acquire at the upper ttl bound", "lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":60000}', { ttlMs: 60000 }],
    ["lease/renew", "lease/renew", '{"id":"r-1","holder":"ctl-a","token":1}', { verb: "lease/renew", token: 1 }],
    [
      "lease/release",
      "lease/release",
      `{"id":"r-1","holder":"ctl-a","token":${MAX}}`,
      { verb: "lease/release", token: Number(MAX), counter: null },
    ],
    [
      "lease/renew with the lowest counter",
      "lease/renew",
      '{"id":"r-1","holder":"ctl-a","token":1,"counter":1}',
      { verb: "lease/renew", counter: 1 },
    ],
    [
      "lease/release with the highest counter",
      "lease/release",
      `{"id":"r-1","holder":"ctl-a","token":1,"counter":${MAX}}`,
      { counter: Number(MAX) },
    ],
    [
      "command, deadline defaulted",
      "command",
      '{"id":"r-1","holder":"ctl-a","token":7,"seq":0,"set":{"valve":42.5,"mode":-1e3}}',
      { verb: "command", token: 7, seq: 0, set: { valve: 42.5, mode: -1000 }, deadlineMs: 5000 },
    ],
    [
      "command with deadline and the largest seq",
      "command",
      `{"id":"r-1","holder":"ctl-a","token":7,"seq":${MAX},"set":{"a.b_c-d":0},"deadlineMs":30000}`,
      { seq: Number(MAX), set: { "a.b_c-d": 0 }, deadlineMs: 30000 },
    ],
    ["read with holder", "read", '{"id":"r-1","holder":"ctl-a"}', { verb: "read", holder: "ctl-a" }],
    ["id of 128 printable characters", "read", `{"id":${JSON.stringify(" ~".repeat(64))},"holder":"ctl-a"}`, { id: " ~".repeat(64) }],
    ["escaped key and value", "read", '{"\\u0069d":"r\\u002d1","holder":"ctl-a"}', { id: "r-1" }],
    ["whitespace everywhere", "read", ' {\n\t"id" : "r-1" ,\r\n "holder" : "ctl-a" } ', { id: "r-1" }],
  ] as const)("%s", (_label, verb, json, expected) => {
    const r = parse(verb, json);
    expect(r.kind).toBe("request");
    if (r.kind === "request") {
      expect(r.request).toMatchObject(expected);
      expect(r.route).toEqual(holderRoute);
    }
  });

  it("a read without holder replies on B/A/reply/_", () => {
    expect(parse("read", '{"id":"r-1"}')).toEqual({
      kind: "request",
      request: { verb: "read", actuator: "valve-1", id: "r-1", holder: null },
      route: { kind: "holderTopic", holderTopic: "fencegate/valve-1/reply/_" },
    });
  });

  it("seq -0 is read as the integer 0 (and never surfaces as -0)", () => {
    const r = parse("command", '{"id":"r-1","holder":"ctl-a","token":7,"seq":-0,"set":{"v":1}}');
    expect(r.kind).toBe("request");
    if (r.kind === "request" && r.request.verb === "command") expect(Object.is(r.request.seq, 0)).toBe(true);
  });

  it("a payload of exactly maxPayloadBytes is accepted", () => {
    const json = '{"id":"r-1","holder":"ctl-a"}';
    const padded = `${json.slice(0, -1)}${" ".repeat(LIMITS.maxPayloadBytes - json.length)}}`;
    expect(Buffer.byteLength(padded)).toBe(LIMITS.maxPayloadBytes);
    expect(parse("read", padded).kind).toBe("request");
  });
});

describe("routes", () => {
  const body = '{"id":"r-1","holder":"ctl-a","ttlMs":5000}';

  it("a v5 response topic wins, correlation data echoed", () => {
    const cd = Buffer.from("corr");
    const r = parse("lease/acquire", body, { responseTopic: "ctl/a/resp", correlationData: cd });
    expect(r.kind === "request" && r.route).toEqual({ kind: "responseTopic", responseTopic: "ctl/a/resp", correlationData: cd });
  });

  it("a v5 response topic without correlation data", () => {
    const r = parse("lease/acquire", body, { responseTopic: "ctl/a/resp" });
    expect(r.kind === "request" && r.route).toEqual({ kind: "responseTopic", responseTopic: "ctl/a/resp" });
  });

  // Once, an unusable response topic was ignored and the request carried out, its
  // reply sent to the holder topic; now it is refused there, so the requester learns why.
  it("a response topic with a wildcard is refused INVALID_REQUEST on the holder topic", () => {
    expect(parse("lease/acquire", body, { responseTopic: "ctl/#" })).toEqual({
      kind: "refused",
      code: "INVALID_REQUEST",
      message: "the response topic contains a wildcard ('+' or '#'); a reply cannot be published to it",
      id: "r-1",
      route: holderRoute,
    });
  });

  it("a read whose response topic has 202 levels is refused on the holder topic, not answered there", () => {
    const r = parse("read", '{"id":"r-1","holder":"ctl-a"}', { responseTopic: `${"x/".repeat(201)}y`, correlationData: Buffer.from("c") });
    expect(r).toMatchObject({ kind: "refused", code: "INVALID_REQUEST", route: holderRoute });
    expect(r.kind === "refused" && r.message).toBe("the response topic has 202 levels; at most 32 are allowed");
  });

  it("a read without holder and a refused response topic is refused on B/A/reply/_", () => {
    expect(parse("read", '{"id":"r-1"}', { responseTopic: "fencegate/valve-2/state" })).toMatchObject({
      kind: "refused",
      code: "INVALID_REQUEST",
      route: { kind: "holderTopic", holderTopic: "fencegate/valve-1/reply/_" },
    });
  });

  it("a refused response topic and no holder: unanswerable, and the reason says why", () => {
    const r = parse("lease/acquire", '{"id":"r-1","ttlMs":5000}', { responseTopic: "fencegate/gateway/gw-1/status" });
    expect(r).toMatchObject({ kind: "unanswerable", cause: "NO_ROUTE" });
    expect(r.kind === "unanswerable" && r.reason).toContain("gateway's own topics");
  });

  it("the response topic ranks before every other problem of the request", () => {
    const r = parse("command", '{"id":"r-1","holder":"ctl-a","token":"x"}', { responseTopic: "$SYS/x", retain: true });
    expect(r).toMatchObject({ kind: "refused", code: "INVALID_REQUEST", route: holderRoute });
    expect(r.kind === "refused" && r.message).toContain("'$'");
  });

  it(`correlation data of ${MAX_CORRELATION_DATA_BYTES} bytes is echoed; one byte more is refused`, () => {
    const atLimit = Buffer.alloc(MAX_CORRELATION_DATA_BYTES, 1);
    expect(parse("lease/acquire", body, { responseTopic: "r", correlationData: atLimit })).toMatchObject({
      kind: "request",
      route: { kind: "responseTopic", responseTopic: "r", correlationData: atLimit },
    });
    expect(parse("lease/acquire", body, { responseTopic: "r", correlationData: Buffer.alloc(MAX_CORRELATION_DATA_BYTES + 1) })).toEqual({
      kind: "refused",
      code: "INVALID_REQUEST",
      message: `the correlation data is ${MAX_CORRELATION_DATA_BYTES + 1} bytes long; at most ${MAX_CORRELATION_DATA_BYTES} are allowed`,
      id: "r-1",
      route: holderRoute,
    });
  });

  it("a read with an invalid holder and no response topic is unanswerable (not sent to _)", () => {
    expect(parse("read", '{"id":"r-1","holder":"a b"}')).toMatchObject({ kind: "unanswerable", cause: "NO_ROUTE" });
  });

  it("a read with an invalid holder and a response topic is refused there", () => {
    expect(parse("read", '{"id":"r-1","holder":null}', { responseTopic: "r" })).toMatchObject({
      kind: "refused",
      code: "INVALID_REQUEST",
      route: { kind: "responseTopic", responseTopic: "r" },
    });
  });
});

describe("exact refusal messages", () => {
  const cmd = (over: string) => `{"id":"r-1","holder":"ctl-a","token":7,"seq":3,"set":{"v":1}${over}}`;
  it.each([
    ["lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":999}', "ttlMs must be an integer from 1000 to 60000"],
    ["lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":60001}', "ttlMs must be an integer from 1000 to 60000"],
    ["lease/acquire", '{"id":"r-1","holder":"ctl-a"}', "ttlMs is required"],
    ["lease/renew", '{"id":"r-1","holder":"ctl-a","token":"7"}', `token must be an integer from 1 to ${MAX}`],
    ["lease/renew", '{"id":"r-1","holder":"ctl-a","token":9007199254740993}', `token must be an integer from 1 to ${MAX}`],
    ["lease/renew", '{"id":"r-1","holder":"ctl-a","token":9007199254740991.4}', `token must be an integer from 1 to ${MAX}`],
    ["lease/release", '{"id":"r-1","holder":"ctl-a","token":0}', `token must be an integer from 1 to ${MAX}`],
    ["lease/renew", '{"id":"r-1","holder":"ctl-a","token":1,"counter":0}', `counter must be an integer from 1 to ${MAX}`],
    ["lease/renew", '{"id":"r-1","holder":"ctl-a","token":1,"counter":2.0}', `counter must be an integer from 1 to ${MAX}`],
    ["lease/release", '{"id":"r-1","holder":"ctl-a","token":1,"counter":9007199254740992}', `counter must be an integer from 1 to ${MAX}`],
    ["command", cmd(',"counter":1'), 'unknown field "counter" in a command request'],
    ["command", cmd(',"seq":-1').replace('"seq":3,', ""), `seq must be an integer from 0 to ${MAX}`],
    ["command", cmd(',"deadlineMs":30001'), "deadlineMs must be an integer from 1 to 30000"],
    ["command", cmd("").replace('{"v":1}', "{}"), "set must be an object of 1 to 64 points, each a point name mapped to a finite number"],
    ["command", cmd("").replace('{"v":1}', '{"v":"1"}'), 'the value of point "v" in set must be a finite number'],
    [
      "command",
      cmd("").replace('{"v":1}', '{"__proto__":1}'),
      `set contains the invalid point name "__proto__"; a point name is 1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-'`,
    ],
    ["command", cmd(',"extra":1'), 'unknown field "extra" in a command request'],
    ["lease/renew", '{"id":"r-1","holder":"ctl-a","token":7,"token":8}', 'the field "token" appears more than once'],
    ["command", cmd("").replace('{"v":1}', '{"v":1,"v":2}'), 'the key "v" appears more than once inside "set"'],
    ["read", '{"id":"r-1","holder":"x","__proto__":{"polluted":true}}', 'unknown field "__proto__" in a read request'],
    ["read", `{"id":"r-1","holder":"x",${JSON.stringify("k".repeat(100))}:1}`, `unknown field "${"k".repeat(64)}…" in a read request`],
  ])("%s %s", (verb, json, message) => {
    const r = parse(verb as RequestVerb, json);
    expect(r).toMatchObject({ kind: "refused", code: "INVALID_REQUEST", id: "r-1", message });
  });

  it("holder errors name the holder (with a response topic)", () => {
    expect(parse("lease/renew", '{"id":"r-1","holder":"","token":7}', { responseTopic: "r" })).toMatchObject({
      message: "holder must be a string of 1 to 128 characters from A-Z, a-z, 0-9, '.', '_', ':' and '-'",
    });
    expect(parse("lease/renew", '{"id":"r-1","token":7}', { responseTopic: "r" })).toMatchObject({ message: "holder is required" });
  });

  it("a malformed actuator id refuses with INVALID_REQUEST, not UNKNOWN_ACTUATOR", () => {
    expect(parse("read", '{"id":"r-1"}', { actuator: "Valve" })).toEqual({
      kind: "refused",
      code: "INVALID_REQUEST",
      id: "r-1",
      message:
        "the actuator id \"Valve\" in the topic is invalid; it must be 1 to 64 characters from a-z, 0-9, '_' and '-', starting with a letter or digit",
      route: { kind: "holderTopic", holderTopic: "fencegate/Valve/reply/_" },
    });
  });

  it("ttl bounds come from the limits passed in", () => {
    const r = parse("lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":500}', {
      limits: { ...LIMITS, minTtlMs: 100, maxTtlMs: 400 },
    });
    expect(r).toMatchObject({ message: "ttlMs must be an integer from 100 to 400" });
  });
});

describe("retained requests", () => {
  it("a valid retained request is refused with RETAINED_REQUEST", () => {
    expect(parse("lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":5000}', { retain: true })).toEqual({
      kind: "refused",
      code: "RETAINED_REQUEST",
      id: "r-1",
      message: "the request was published with the retain flag set, and a retained request is stale by definition",
      route: holderRoute,
    });
  });

  it("INVALID_REQUEST ranks before RETAINED_REQUEST", () => {
    expect(parse("lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":0}', { retain: true })).toMatchObject({
      code: "INVALID_REQUEST",
    });
  });
});

describe("hostile payloads", () => {
  it("size is checked before decoding: an oversized non-UTF-8 payload is TOO_LARGE", () => {
    expect(parse("read", Buffer.alloc(LIMITS.maxPayloadBytes + 1, 0xff))).toMatchObject({ cause: "TOO_LARGE" });
  });

  it("a byte order mark makes the payload invalid JSON", () => {
    expect(parse("read", Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"id":"r-1"}')]))).toMatchObject({
      cause: "NOT_JSON",
    });
  });

  it("16 KiB of nesting inside a field neither crashes nor recurses", () => {
    const depth = 8000;
    const json = `{"id":"r-1","holder":"ctl-a","token":7,"seq":1,"set":{"v":${"[".repeat(depth)}${"]".repeat(depth)}}}`;
    expect(Buffer.byteLength(json)).toBeLessThanOrEqual(LIMITS.maxPayloadBytes);
    expect(parse("command", json)).toMatchObject({ kind: "refused", code: "INVALID_REQUEST" });
  });

  it("a __proto__ field pollutes nothing", () => {
    parse("read", '{"id":"r-1","__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}');
    parse("command", '{"id":"r-1","holder":"h","token":1,"seq":1,"set":{"__proto__":{"polluted":true}}}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty("polluted");
  });

  it("an accepted set is a plain object holding exactly the points sent", () => {
    const r = parse("command", '{"id":"r-1","holder":"h","token":1,"seq":1,"set":{"a":1,"b":2}}');
    expect(r.kind === "request" && r.request.verb === "command" && r.request.set).toStrictEqual({ a: 1, b: 2 });
  });
});

describe("prototype keys in set", () => {
  it.each(['{"a":1,"__proto__":{"x":1}}', '{"a":1,"__proto__":1}', '{"__proto__":null,"a":1}', '{"a":1,"constructor":2}'])(
    "refuses %s rather than silently dropping or applying the key",
    (set) => {
      const r = parse("command", `{"id":"r-1","holder":"h","token":1,"seq":1,"set":${set}}`);
      expect(r).toMatchObject({ kind: "refused", code: "INVALID_REQUEST" });
      expect(r.kind === "refused" && r.message).toMatch(/^set contains the invalid point name "(__proto__|constructor)"/);
    },
  );
});
