/**
 * The malformed-request corpus: 200+ distinct bad requests, each with its exact expected
 * outcome. Used by test/unit/adapters/mqtt/malformed.test.ts against `parseRequest`, and meant to be
 * replayed by the daemon's end-to-end test against the real gateway (publish `payload` to
 * `B/<actuator>/<topicVerb>` with `retain`, the v5 `responseTopic`/`correlationData` when
 * given, and expect a reply on `expect.replyTo` or, for `unanswerable`, no reply at all).
 *
 * Config independence: every case is malformed whatever the gateway's bounds, provided its
 * ttl bounds contain 5000 ms and its payload limit is the contract's 16 KiB. (Bound checks
 * that depend on configuration live in requests.test.ts.)
 */
import fc from "fast-check";
import type { RequestVerb } from "../../../../packages/protocol/src/topics.ts";
import type { RequestLimits, UnanswerableCause } from "../../../../src/adapters/mqtt/requests.ts";

export const MALFORMED_BASE = "fencegate";
export const MALFORMED_LIMITS: RequestLimits = {
  maxPayloadBytes: 16 * 1024,
  minTtlMs: 1000,
  maxTtlMs: 60_000,
  maxDeadlineMs: 30_000,
  defaultDeadlineMs: 5000,
};

export type ReplyTo =
  /** `B/` + suffix, e.g. `valve-1/reply/ctl-a`. */
  { readonly kind: "holderTopic"; readonly suffix: string } | { readonly kind: "responseTopic"; readonly topic: string };

export type Expectation =
  | {
      readonly kind: "refused";
      readonly code: "INVALID_REQUEST" | "RETAINED_REQUEST";
      readonly id: string;
      readonly replyTo: ReplyTo;
      /** A word the message must contain: the offending field (or `retain`). */
      readonly names: string;
    }
  | { readonly kind: "unanswerable"; readonly cause: UnanswerableCause };

export interface MalformedCase {
  readonly name: string;
  readonly actuator: string;
  readonly topicVerb: RequestVerb;
  readonly payload: Buffer;
  readonly retain: boolean;
  readonly responseTopic?: string;
  readonly correlationData?: Buffer;
  readonly expect: Expectation;
}

export const ACTUATOR = "valve-1";
export const HOLDER = "ctl-a";
export const REQ_ID = "r-1";
export const RESPONSE_TOPIC = "ctl/a/responses";

type Fields = readonly (readonly [string, string])[];

/** Valid requests as (key, raw JSON value) pairs, so cases control the exact literal text. */
export const VALID: Readonly<Record<RequestVerb, Fields>> = {
  "lease/acquire": [
    ["id", '"r-1"'],
    ["holder", '"ctl-a"'],
    ["ttlMs", "5000"],
  ],
  "lease/renew": [
    ["id", '"r-1"'],
    ["holder", '"ctl-a"'],
    ["token", "7"],
  ],
  "lease/release": [
    ["id", '"r-1"'],
    ["holder", '"ctl-a"'],
    ["token", "7"],
  ],
  command: [
    ["id", '"r-1"'],
    ["holder", '"ctl-a"'],
    ["token", "7"],
    ["seq", "3"],
    ["set", '{"valve":42.5}'],
  ],
  read: [
    ["id", '"r-1"'],
    ["holder", '"ctl-a"'],
  ],
};
const VERBS = Object.keys(VALID) as RequestVerb[];

export function render(fields: Fields): string {
  return `{${fields.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;
}
function withField(fields: Fields, key: string, raw: string): Fields {
  return fields.some(([k]) => k === key) ? fields.map(([k, v]) => [k, k === key ? raw : v] as const) : [...fields, [key, raw]];
}
function without(fields: Fields, key: string): Fields {
  return fields.filter(([k]) => k !== key);
}

const holderReply: ReplyTo = { kind: "holderTopic", suffix: `${ACTUATOR}/reply/${HOLDER}` };
const v5Reply: ReplyTo = { kind: "responseTopic", topic: RESPONSE_TOPIC };
const invalid = (names: string, replyTo: ReplyTo = holderReply, id = REQ_ID): Expectation => ({
  kind: "refused",
  code: "INVALID_REQUEST",
  id,
  replyTo,
  names,
});
const dropped = (cause: UnanswerableCause): Expectation => ({ kind: "unanswerable", cause });

const BAD_TOKENS: readonly (readonly [string, string])[] = [
  ["zero", "0"],
  ["negative", "-1"],
  ["minus zero", "-0"],
  ["fraction", "1.5"],
  ["integer-valued float", "7.0"],
  ["exponent", "7e0"],
  ["upper exponent", "7E0"],
  ["fraction with exponent", "0.7e1"],
  ["string", '"7"'],
  ["null", "null"],
  ["true", "true"],
  ["array", "[7]"],
  ["object", '{"token":7}'],
  ["2^53", "9007199254740992"],
  ["2^53+1 (parses to 2^53)", "9007199254740993"],
  ["max safe + fraction (parses to max safe)", "9007199254740991.4"],
  ["just under max safe + fraction", "9007199254740990.6"],
  ["20 digits", "12345678901234567890"],
  ["1e400 (Infinity)", "1e400"],
  ["-1e400", "-1e400"],
  ["tiny", "1e-400"],
  ["huge exponent-less", "1" + "0".repeat(300)],
];

const BAD_SEQS: readonly (readonly [string, string])[] = [
  ["negative", "-1"],
  ["fraction", "0.5"],
  ["integer-valued float", "3.0"],
  ["exponent", "3e0"],
  ["string", '"3"'],
  ["null", "null"],
  ["false", "false"],
  ["2^53", "9007199254740992"],
  ["2^53+1", "9007199254740993"],
  ["max safe + fraction", "9007199254740991.3"],
  ["1e400", "1e400"],
  ["array", "[]"],
];

const BAD_TTLS: readonly (readonly [string, string])[] = [
  ["zero", "0"],
  ["negative", "-5000"],
  ["fraction", "5000.5"],
  ["integer-valued float", "5000.0"],
  ["exponent", "5e3"],
  ["string", '"5000"'],
  ["null", "null"],
  ["object", "{}"],
  ["unsafe", "9007199254740993"],
  ["1e400", "1e400"],
];

const BAD_DEADLINES: readonly (readonly [string, string])[] = [
  ["zero", "0"],
  ["negative", "-1"],
  ["fraction", "100.5"],
  ["exponent", "1e2"],
  ["string", '"100"'],
  ["null", "null"],
  ["unsafe", "9007199254740993"],
  ["1e400", "1e400"],
];

const BAD_SETS: readonly (readonly [string, string])[] = [
  ["empty object", "{}"],
  ["array", '[{"valve":1}]'],
  ["null", "null"],
  ["number", "1"],
  ["string", '"valve=1"'],
  ["65 points", `{${Array.from({ length: 65 }, (_, i) => `"p${i}":1`).join(",")}}`],
  ["string value", '{"valve":"1"}'],
  ["null value", '{"valve":null}'],
  ["boolean value", '{"valve":true}'],
  ["array value", '{"valve":[1]}'],
  ["object value", '{"valve":{"v":1}}'],
  ["infinite value", '{"valve":1e400}'],
  ["empty point name", '{"":1}'],
  ["point name with space", '{"a b":1}'],
  ["point name with slash", '{"a/b":1}'],
  ["65-char point name", `{"${"p".repeat(65)}":1}`],
  ["non-ASCII point name", '{"vä":1}'],
  ["__proto__ point", '{"__proto__":1}'],
  ["__proto__ point with object", '{"__proto__":{"polluted":1}}'],
  ["constructor point", '{"constructor":1}'],
  ["toString point", '{"toString":1}'],
  ["hasOwnProperty point", '{"hasOwnProperty":1}'],
  ["__proto__ beside a good point", '{"valve":1,"__proto__":{"valve":2}}'],
  ["null __proto__ beside a good point", '{"__proto__":null,"valve":1}'],
  ["one good one bad value", '{"a":1,"b":"2"}'],
  ["deeply nested value", `{"valve":${"[".repeat(5000)}${"]".repeat(5000)}}`],
];

const BAD_IDS: readonly (readonly [string, string])[] = [
  ["missing", ""],
  ["number", "1"],
  ["null", "null"],
  ["empty", '""'],
  ["129 chars", JSON.stringify("i".repeat(129))],
  ["control char", '"a\\u0001b"'],
  ["DEL", '"a\\u007fb"'],
  ["tab", '"a\\tb"'],
  ["newline", '"a\\nb"'],
  ["non-ASCII", '"ré"'],
  ["emoji", '"r😀"'],
  ["array", '["r-1"]'],
  ["object", '{"id":"r-1"}'],
  ["true", "true"],
];

const BAD_HOLDERS: readonly (readonly [string, string])[] = [
  ["missing", ""],
  ["empty", '""'],
  ["129 chars", JSON.stringify("h".repeat(129))],
  ["space", '"ctl a"'],
  ["slash", '"ctl/a"'],
  ["plus wildcard", '"ctl+"'],
  ["hash wildcard", '"ctl#"'],
  ["non-ASCII", '"ctlé"'],
  ["number", "1"],
  ["null", "null"],
];

const UNKNOWN_FIELDS: readonly (readonly [string, string])[] = [
  ["extra", "1"],
  ["__proto__", '{"isAdmin":true}'],
  ["constructor", '{"prototype":{"x":1}}'],
  ["prototype", "{}"],
  ["Id", '"r-2"'],
  ["", "1"],
  ["holder ", '"ctl-a"'],
  ["\u0000", "0"],
];

const BAD_ACTUATORS: readonly string[] = ["Valve-1", "-valve", "_valve", "", "v".repeat(65), "vä", "valve.1", "valve 1"];

/** The cause for noise without '{': decided by a UTF-8 round trip and JSON.parse, not by the code under test. */
function noiseCause(bytes: Buffer): UnanswerableCause {
  if (!Buffer.from(bytes.toString("utf8"), "utf8").equals(bytes)) return "NOT_UTF8";
  try {
    JSON.parse(bytes.toString("utf8"));
    return "NOT_OBJECT";
  } catch {
    return "NOT_JSON";
  }
}

function kase(
  name: string,
  topicVerb: RequestVerb,
  payload: string | Buffer,
  expect: Expectation,
  extra: Partial<Pick<MalformedCase, "actuator" | "retain" | "responseTopic" | "correlationData">> = {},
): MalformedCase {
  return {
    name,
    actuator: extra.actuator ?? ACTUATOR,
    topicVerb,
    payload: typeof payload === "string" ? Buffer.from(payload, "utf8") : payload,
    retain: extra.retain ?? false,
    ...(extra.responseTopic === undefined ? {} : { responseTopic: extra.responseTopic }),
    ...(extra.correlationData === undefined ? {} : { correlationData: extra.correlationData }),
    expect,
  };
}

export function malformedRequests(): MalformedCase[] {
  const out: MalformedCase[] = [];
  const acquire = VALID["lease/acquire"];
  const command = VALID.command;

  // --- Not parseable: unanswerable whatever else the message carries. -----------------
  const validCommand = render(command);
  const badUtf8: readonly (readonly [string, number[]])[] = [
    ["0xff", [0xff]],
    ["0xfe", [0xfe]],
    ["lone continuation byte", [0x80]],
    ["overlong slash", [0xc0, 0xaf]],
    ["overlong NUL", [0xc0, 0x80]],
    ["truncated 3-byte sequence", [0xe2, 0x82]],
    ["UTF-16 surrogate encoded", [0xed, 0xa0, 0x80]],
    ["above U+10FFFF", [0xf4, 0x90, 0x80, 0x80]],
    ["0xf5 lead byte", [0xf5, 0x80, 0x80, 0x80]],
    ["latin-1 é", [0xe9]],
  ];
  for (const [label, bytes] of badUtf8) {
    const at = validCommand.indexOf("42.5") - 1; // inside nothing: between ':' and the number
    const inString = validCommand.indexOf("ctl-a") + 3;
    out.push(
      kase(
        `invalid UTF-8 (${label}) inside a string`,
        "command",
        Buffer.concat([Buffer.from(validCommand.slice(0, inString)), Buffer.from(bytes), Buffer.from(validCommand.slice(inString))]),
        dropped("NOT_UTF8"),
        { responseTopic: RESPONSE_TOPIC },
      ),
      kase(
        `invalid UTF-8 (${label}) between tokens`,
        "lease/acquire",
        Buffer.concat([Buffer.from(render(acquire).slice(0, -1) + ","), Buffer.from(bytes), Buffer.from("}")]),
        dropped("NOT_UTF8"),
      ),
    );
    void at;
  }
  // Seeded, so the "random" cases are the same every run. No '{' anywhere, so no JSON
  // object can hide in the noise.
  const noise = fc.sample(
    fc.uint8Array({ minLength: 1, maxLength: 64 }).map((a) => Buffer.from(a.map((b) => (b === 0x7b ? 0x7a : b)))),
    { seed: 0xfe9ce, numRuns: 20 },
  );
  noise.forEach((bytes, i) => {
    out.push(kase(`random bytes #${i} (${bytes.length} bytes)`, VERBS[i % VERBS.length] as RequestVerb, bytes, dropped(noiseCause(bytes))));
  });
  const notJson: readonly (readonly [string, string])[] = [
    ["empty payload", ""],
    ["whitespace only", " \n\t "],
    ["single quotes", "{'id':'r-1','holder':'ctl-a','ttlMs':5000}"],
    ["unquoted keys", '{id:"r-1",holder:"ctl-a",ttlMs:5000}'],
    ["trailing comma", render(acquire).slice(0, -1) + ",}"],
    ["comment", `/* hi */${render(acquire)}`],
    ["NaN", render(withField(acquire, "ttlMs", "NaN"))],
    ["Infinity", render(withField(acquire, "ttlMs", "Infinity"))],
    ["hex number", render(withField(acquire, "ttlMs", "0x1388"))],
    ["leading zero", render(withField(acquire, "ttlMs", "05000"))],
    ["plus sign", render(withField(acquire, "ttlMs", "+5000"))],
    ["trailing garbage", render(acquire) + "x"],
    ["two objects", render(acquire) + render(acquire)],
    ["unterminated string", '{"id":"r-1,"holder":"ctl-a","ttlMs":5000}'],
    ["raw newline in string", '{"id":"r\n1","holder":"ctl-a","ttlMs":5000}'],
    ["bad escape", '{"id":"r\\x01","holder":"ctl-a","ttlMs":5000}'],
    ["byte order mark", `\uFEFF${render(acquire)}`],
    ["unbalanced deep nesting", "[".repeat(16_000)],
  ];
  for (const [label, text] of notJson) out.push(kase(`not JSON: ${label}`, "lease/acquire", text, dropped("NOT_JSON")));
  for (let cut = 5; cut < validCommand.length; cut += 9) {
    out.push(kase(`not JSON: command truncated to ${cut} chars`, "command", validCommand.slice(0, cut), dropped("NOT_JSON")));
  }
  const notObject: readonly (readonly [string, string])[] = [
    ["array", "[]"],
    ["array holding a request", `[${render(acquire)}]`],
    ["null", "null"],
    ["number", "1"],
    ["string", '"r-1"'],
    ["true", "true"],
    ["deep arrays", `${"[".repeat(8000)}${"]".repeat(8000)}`],
    ["deep array of objects", `${'[{"a":'.repeat(2000)}1${"}]".repeat(2000)}`],
  ];
  for (const [label, text] of notObject) {
    out.push(kase(`not an object: ${label}`, "read", text, dropped("NOT_OBJECT"), { responseTopic: RESPONSE_TOPIC }));
  }
  out.push(
    kase("deep objects without id", "read", `${'{"a":'.repeat(2500)}1${"}".repeat(2500)}`, dropped("NO_ID")),
    kase("huge array as id", "read", `{"id":[${Array(7000).fill("0").join(",")}]}`, dropped("NO_ID")),
  );

  // --- Too large: dropped before parsing, even with a response topic. -----------------
  const pad = (text: string, total: number) => `${text.slice(0, -1)}${" ".repeat(total - text.length)}}`;
  out.push(
    kase("16385 bytes (one over), otherwise valid", "lease/acquire", pad(render(acquire), 16_385), dropped("TOO_LARGE"), {
      responseTopic: RESPONSE_TOPIC,
    }),
    kase("17 KiB command", "command", pad(validCommand, 17 * 1024), dropped("TOO_LARGE")),
    kase("1 MiB of spaces around a request", "lease/acquire", pad(render(acquire), 1024 * 1024), dropped("TOO_LARGE")),
    kase("1 MiB of nesting", "read", "[".repeat(1024 * 1024), dropped("TOO_LARGE")),
    kase("over the limit and invalid UTF-8", "read", Buffer.alloc(20_000, 0xff), dropped("TOO_LARGE")),
  );

  // --- Unknowable id: unanswerable, even with a response topic. -----------------------
  for (const [label, raw] of BAD_IDS) {
    for (const verb of ["lease/acquire", "command"] as const) {
      const fields = raw === "" ? without(VALID[verb], "id") : withField(VALID[verb], "id", raw);
      out.push(kase(`${verb}: id ${label}`, verb, render(fields), dropped("NO_ID")));
    }
    out.push(
      kase(`read with response topic: id ${label}`, "read", render(raw === "" ? [] : [["id", raw]]), dropped("NO_ID"), {
        responseTopic: RESPONSE_TOPIC,
      }),
    );
  }

  // --- Bad holder: unanswerable without a response topic, refused with one. -----------
  for (const [label, raw] of BAD_HOLDERS) {
    for (const verb of ["lease/renew", "command"] as const) {
      const fields = raw === "" ? without(VALID[verb], "holder") : withField(VALID[verb], "holder", raw);
      out.push(kase(`${verb}: holder ${label}, no response topic`, verb, render(fields), dropped("NO_ROUTE")));
      out.push(
        kase(`${verb}: holder ${label}, v5 response topic`, verb, render(fields), invalid("holder", v5Reply), {
          responseTopic: RESPONSE_TOPIC,
          correlationData: Buffer.from([1, 2, 3]),
        }),
      );
    }
    if (raw !== "") {
      out.push(kase(`read: holder ${label}, no response topic`, "read", render(withField(VALID.read, "holder", raw)), dropped("NO_ROUTE")));
    }
  }
  out.push(
    kase("holder missing, response topic has a wildcard", "lease/acquire", render(without(acquire, "holder")), dropped("NO_ROUTE"), {
      responseTopic: "ctl/+/responses",
    }),
    kase("holder missing, empty response topic", "lease/acquire", render(without(acquire, "holder")), dropped("NO_ROUTE"), {
      responseTopic: "",
    }),
  );

  // --- Fields with bad values: refused, INVALID_REQUEST, naming the field. -------------
  for (const verb of ["lease/renew", "lease/release", "command"] as const) {
    for (const [label, raw] of BAD_TOKENS) {
      out.push(kase(`${verb}: token ${label}`, verb, render(withField(VALID[verb], "token", raw)), invalid("token")));
    }
  }
  out.push(
    kase(
      "renew: token 2^53+1 spelt with an escaped key",
      "lease/renew",
      '{"id":"r-1","holder":"ctl-a","\\u0074oken":9007199254740993}',
      invalid("token"),
    ),
    kase("renew: token 7.0 spelt with an escaped key", "lease/renew", '{"id":"r-1","holder":"ctl-a","tok\\u0065n":7.0}', invalid("token")),
    kase(
      "renew: token with whitespace around 7.0",
      "lease/renew",
      '{ "id" : "r-1" , "holder" : "ctl-a" , "token" : 7.0 }',
      invalid("token"),
    ),
  );
  for (const [label, raw] of BAD_SEQS) {
    out.push(kase(`command: seq ${label}`, "command", render(withField(command, "seq", raw)), invalid("seq")));
  }
  for (const [label, raw] of BAD_TTLS) {
    out.push(kase(`acquire: ttlMs ${label}`, "lease/acquire", render(withField(acquire, "ttlMs", raw)), invalid("ttlMs")));
  }
  out.push(
    kase(
      "acquire: ttlMs deeply nested",
      "lease/acquire",
      render(withField(acquire, "ttlMs", `${'{"a":'.repeat(2500)}1${"}".repeat(2500)}`)),
      invalid("ttlMs"),
    ),
  );
  for (const [label, raw] of BAD_DEADLINES) {
    out.push(kase(`command: deadlineMs ${label}`, "command", render(withField(command, "deadlineMs", raw)), invalid("deadlineMs")));
  }
  for (const [label, raw] of BAD_SETS) {
    out.push(kase(`command: set ${label}`, "command", render(withField(command, "set", raw)), invalid("set")));
  }
  out.push(
    kase(
      "command: set is a huge array",
      "command",
      render(withField(command, "set", `[${Array(7000).fill("1").join(",")}]`)),
      invalid("set"),
    ),
  );

  // --- Missing required fields (other than id/holder, which decide the route). --------
  for (const verb of VERBS) {
    for (const [key] of VALID[verb]) {
      if (key === "id" || key === "holder") continue;
      out.push(kase(`${verb}: ${key} missing`, verb, render(without(VALID[verb], key)), invalid(key)));
    }
  }

  // --- Unknown fields, per verb. ---------------------------------------------------------
  for (const verb of VERBS) {
    for (const [key, raw] of UNKNOWN_FIELDS) {
      out.push(kase(`${verb}: unknown field ${JSON.stringify(key)}`, verb, render([...VALID[verb], [key, raw]]), invalid("unknown field")));
    }
  }
  const foreign: readonly (readonly [RequestVerb, string, string])[] = [
    ["lease/acquire", "token", "7"],
    ["lease/renew", "ttlMs", "5000"],
    ["lease/release", "seq", "1"],
    ["lease/renew", "set", '{"valve":1}'],
    ["read", "token", "7"],
    ["read", "set", '{"valve":1}'],
    ["command", "ttlMs", "5000"],
  ];
  for (const [verb, key, raw] of foreign) {
    out.push(kase(`${verb}: field ${key} of another verb`, verb, render([...VALID[verb], [key, raw]]), invalid(key)));
  }
  out.push(
    kase(
      "read without holder: unknown field (reply to _)",
      "read",
      '{"id":"r-1","x":1}',
      invalid("x", { kind: "holderTopic", suffix: `${ACTUATOR}/reply/_` }),
    ),
  );

  // --- Duplicate keys: JSON.parse would silently keep the last. ------------------------
  out.push(
    kase("duplicate token", "lease/renew", render([...VALID["lease/renew"], ["token", "8"]]), invalid("token")),
    kase(
      "duplicate id (last one is echoed)",
      "lease/renew",
      render([...VALID["lease/renew"], ["id", '"r-2"']]),
      invalid("id", holderReply, "r-2"),
    ),
    kase("duplicate point in set", "command", render(withField(command, "set", '{"valve":1,"valve":2}')), invalid("valve")),
    kase("duplicate escaped key", "lease/acquire", '{"id":"r-1","holder":"ctl-a","ttlMs":5000,"ttl\\u004ds":6000}', invalid("ttlMs")),
  );

  // --- Malformed actuator id in the topic: INVALID_REQUEST (ranks before UNKNOWN_ACTUATOR).
  for (const actuator of BAD_ACTUATORS) {
    out.push(
      kase(
        `actuator ${JSON.stringify(actuator)} in the topic`,
        "lease/acquire",
        render(acquire),
        invalid("actuator", {
          kind: "holderTopic",
          suffix: `${actuator}/reply/${HOLDER}`,
        }),
        { actuator },
      ),
    );
  }

  // --- Retained. ------------------------------------------------------------------------
  for (const verb of VERBS) {
    out.push(
      kase(
        `retained valid ${verb}`,
        verb,
        render(VALID[verb]),
        { kind: "refused", code: "RETAINED_REQUEST", id: REQ_ID, replyTo: holderReply, names: "retain" },
        { retain: true },
      ),
      kase(
        `retained ${verb} with an unknown field (INVALID_REQUEST ranks first)`,
        verb,
        render([...VALID[verb], ["stale", "true"]]),
        invalid("stale"),
        { retain: true },
      ),
      kase(`retained ${verb} without id`, verb, render(without(VALID[verb], "id")), dropped("NO_ID"), { retain: true }),
    );
  }
  out.push(
    kase(
      "retained read without holder (reply to _)",
      "read",
      '{"id":"r-1"}',
      {
        kind: "refused",
        code: "RETAINED_REQUEST",
        id: REQ_ID,
        replyTo: { kind: "holderTopic", suffix: `${ACTUATOR}/reply/_` },
        names: "retain",
      },
      { retain: true },
    ),
    kase(
      "retained command with response topic",
      "command",
      render(command),
      { kind: "refused", code: "RETAINED_REQUEST", id: REQ_ID, replyTo: v5Reply, names: "retain" },
      { retain: true, responseTopic: RESPONSE_TOPIC },
    ),
    kase("retained garbage", "command", "garbage", dropped("NOT_JSON"), { retain: true }),
  );
  return out;
}
