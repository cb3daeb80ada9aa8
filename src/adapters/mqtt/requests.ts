/**
 * Parsing and validating requests of the MQTT API v1 (docs/mqtt-api.md), purely:
 * bytes and MQTT properties in, a request, a refusal to answer, or "unanswerable" out.
 *
 * Order of work, each step only once the previous one passed:
 *  1. size (before any decoding), UTF-8, JSON, root is an object: failing any of these we
 *     know neither `id` nor, without a v5 Response Topic, where to reply → `unanswerable`;
 *  2. `id` (1..128 printable ASCII) and the route (a v5 Response Topic, else a valid
 *     `holder`, else for `read` without `holder` the `_` topic) → else `unanswerable`;
 *  2b. the requester's budget (admission.ts), unless it is the lease holder's → else
 *     `refused` with `OVERLOADED`, or `unanswerable` (`OVER_BUDGET`) once it has been told;
 *  3. a Response Topic or Correlation Data the gateway will not reply with → `refused` with
 *     `INVALID_REQUEST` on the holder route (`unanswerable` without one);
 *  4. full validation → `refused` with `INVALID_REQUEST` naming the first offending field;
 *  5. the retain flag → `refused` with `RETAINED_REQUEST` (it ranks after INVALID_REQUEST);
 *  6. → `request`.
 */
import * as z from "zod";
import { scanJson, type JsonScan } from "./json-scan.ts";
import {
  HOLDER_PATTERN,
  REQUEST_ID_PATTERN,
  type GatewayRequest,
  type RequestVerb,
  isActuatorId,
  isPointName,
  replyTopic,
  responseTopicProblem,
} from "../../../packages/protocol/src/index.ts";

export const MAX_SET_POINTS = 64;
/**
 * The longest v5 Correlation Data the gateway echoes, in bytes: every reply owed holds it,
 * and the reply must stay far below the broker's packet limit. Request ids (at most 128
 * characters) and UUIDs fit many times over.
 */
export const MAX_CORRELATION_DATA_BYTES = 1024;
const MAX = Number.MAX_SAFE_INTEGER;

export interface RequestLimits {
  /** Larger payloads are dropped unread (`unanswerable`). The contract's value is 16 KiB. */
  readonly maxPayloadBytes: number;
  readonly minTtlMs: number;
  readonly maxTtlMs: number;
  /** The largest `deadlineMs` a command may ask for. */
  readonly maxDeadlineMs: number;
  /** The `deadlineMs` of a command that gives none. */
  readonly defaultDeadlineMs: number;
}

/** Every optional field of a request filled in: absent MAC and counter are null, an absent deadline the default. */
type Filled<R> = { readonly [K in keyof R]-?: Exclude<R[K], undefined> };

/** A request as parsed: the contract's request by verb (packages/protocol), with its id and actuator, nothing left out. */
export type Request = { readonly actuator: string; readonly id: string } & Filled<GatewayRequest>;

/** Where the reply goes: the v5 Response Topic (with Correlation Data echoed), or `B/A/reply/H|_`. */
export type ReplyRoute =
  | { readonly kind: "responseTopic"; readonly responseTopic: string; readonly correlationData?: Buffer }
  | { readonly kind: "holderTopic"; readonly holderTopic: string };

export type ParseResult =
  | { readonly kind: "request"; readonly request: Request; readonly route: ReplyRoute }
  | {
      readonly kind: "refused";
      readonly code: "INVALID_REQUEST" | "RETAINED_REQUEST" | "OVERLOADED";
      /** One human sentence naming the offending field or condition. */
      readonly message: string;
      /** Always known: a request whose id is unknown is `unanswerable`, never refused. */
      readonly id: string;
      readonly route: ReplyRoute;
    }
  | {
      readonly kind: "unanswerable";
      /** A stable label, e.g. for a metric. */
      readonly cause: UnanswerableCause;
      /** One human sentence for the log. */
      readonly reason: string;
    };

export type UnanswerableCause = "TOO_LARGE" | "NOT_UTF8" | "NOT_JSON" | "NOT_OBJECT" | "NO_ID" | "NO_ROUTE" | "OVER_BUDGET";

export interface IncomingRequest {
  /** The base topic `B`, to build the fallback reply topic. */
  readonly base: string;
  /** The actuator level of the topic, as received (see `parseRequestTopic`). */
  readonly actuator: string;
  readonly verb: RequestVerb;
  readonly payload: Uint8Array;
  readonly retain: boolean;
  /** MQTT v5 Response Topic property, if any. */
  readonly responseTopic?: string | undefined;
  /** MQTT v5 Correlation Data property, if any; echoed with the reply. */
  readonly correlationData?: Buffer | undefined;
  readonly limits: RequestLimits;
  /**
   * Asked once id and route are known, with the payload's raw `holder` and `token` (not yet
   * validated): null admits the request; a sentence refuses it OVERLOADED, or, with `drop`,
   * drops it unanswered (admission.ts).
   */
  readonly admit?: (holder: unknown, token: unknown) => { readonly message: string; readonly drop: boolean } | null;
}

// ---------------------------------------------------------------------------------------

const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function quote(s: string): string {
  return JSON.stringify(s.length > 64 ? `${s.slice(0, 64)}…` : s);
}

function hasOwn(o: object, k: string): boolean {
  return Object.prototype.hasOwnProperty.call(o, k);
}

function own(o: Record<string, unknown>, k: string): unknown {
  return hasOwn(o, k) ? o[k] : undefined;
}

const FIELDS: Readonly<Record<RequestVerb, readonly string[]>> = {
  "lease/acquire": ["id", "holder", "ttlMs"],
  "lease/renew": ["id", "holder", "token", "mac", "counter"],
  "lease/release": ["id", "holder", "token", "mac", "counter"],
  command: ["id", "holder", "token", "seq", "set", "deadlineMs", "mac"],
  read: ["id", "holder"],
};

/** Fields whose JSON literal must be a plain integer (no fraction, no exponent). */
const INTEGER_FIELDS = ["ttlMs", "token", "seq", "deadlineMs", "counter"] as const;
const INTEGER_LITERAL_RE = /^-?(?:0|[1-9][0-9]*)$/;

function messages(limits: RequestLimits): Readonly<Record<string, string>> {
  return {
    id: "id must be a string of 1 to 128 printable ASCII characters",
    holder: "holder must be a string of 1 to 128 characters from A-Z, a-z, 0-9, '.', '_', ':' and '-'",
    ttlMs: `ttlMs must be an integer from ${limits.minTtlMs} to ${limits.maxTtlMs}`,
    token: `token must be an integer from 1 to ${MAX}`,
    seq: `seq must be an integer from 0 to ${MAX}`,
    set: `set must be an object of 1 to ${MAX_SET_POINTS} points, each a point name mapped to a finite number`,
    deadlineMs: `deadlineMs must be an integer from 1 to ${limits.maxDeadlineMs}`,
    mac: "mac must be 64 lowercase hexadecimal characters (HMAC-SHA256)",
    counter: `counter must be an integer from 1 to ${MAX}`,
  };
}

const safeInt = (min: number, max: number) => z.number().refine((v) => Number.isSafeInteger(v) && v >= min && v <= max);

const pointName = z.string().refine(isPointName);

function badPointMessage(name: string): string {
  return `set contains the invalid point name ${quote(name)}; a point name is 1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-'`;
}

function buildSchemas(limits: RequestLimits): Readonly<Record<RequestVerb, z.ZodType>> {
  const id = z.string().regex(REQUEST_ID_PATTERN);
  const holder = z.string().regex(HOLDER_PATTERN);
  const token = safeInt(1, MAX);
  // Authenticated actuators (an extension): see packages/protocol/src/signature.ts.
  const mac = z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional();
  const counter = safeInt(1, MAX).optional();
  return {
    "lease/acquire": z.strictObject({ id, holder, ttlMs: safeInt(limits.minTtlMs, limits.maxTtlMs) }),
    "lease/renew": z.strictObject({ id, holder, token, mac, counter }),
    "lease/release": z.strictObject({ id, holder, token, mac, counter }),
    command: z.strictObject({
      id,
      holder,
      token,
      seq: safeInt(0, MAX),
      set: z.record(pointName, z.number().refine(Number.isFinite)).refine((s) => {
        const n = Object.keys(s).length;
        return n >= 1 && n <= MAX_SET_POINTS;
      }),
      deadlineMs: safeInt(1, limits.maxDeadlineMs).optional(),
      mac,
    }),
    read: z.strictObject({ id, holder: holder.optional() }),
  };
}

interface Compiled {
  readonly schemas: Readonly<Record<RequestVerb, z.ZodType>>;
  readonly messages: Readonly<Record<string, string>>;
}
const compiled = new WeakMap<RequestLimits, Compiled>();
function compile(limits: RequestLimits): Compiled {
  let c = compiled.get(limits);
  if (!c) {
    c = { schemas: buildSchemas(limits), messages: messages(limits) };
    compiled.set(limits, c);
  }
  return c;
}

/** The message for zod's first issue, in the schema's field order. */
function issueMessage(obj: Record<string, unknown>, issue: z.core.$ZodIssue, msgs: Readonly<Record<string, string>>): string {
  const field = issue.path[0];
  if (typeof field !== "string") return "the request has an invalid shape"; // unreachable: unknown keys are caught first
  if (!hasOwn(obj, field)) return `${field} is required`;
  const point = issue.path[1];
  if (field === "set" && typeof point === "string") {
    return issue.code === "invalid_key"
      ? badPointMessage(point) // unreachable: names are checked before zod runs
      : `the value of point ${quote(point)} in set must be a finite number`;
  }
  return msgs[field] ?? `${field} is invalid`;
}

/** Validates everything; returns the one-sentence message of the first problem, or the request. */
function validate(
  inc: IncomingRequest,
  obj: Record<string, unknown>,
  scan: JsonScan,
): { ok: true; request: Request } | { ok: false; message: string } {
  const { schemas, messages: msgs } = compile(inc.limits);
  if (!isActuatorId(inc.actuator)) {
    return {
      ok: false,
      message: `the actuator id ${quote(inc.actuator)} in the topic is invalid; it must be 1 to 64 characters from a-z, 0-9, '_' and '-', starting with a letter or digit`,
    };
  }
  if (scan.duplicate) {
    const { key, parent, depth } = scan.duplicate;
    return {
      ok: false,
      message:
        depth === 1
          ? `the field ${quote(key)} appears more than once`
          : `the key ${quote(key)} appears more than once inside ${parent === null ? "a nested value" : quote(parent)}`,
    };
  }
  const allowed = FIELDS[inc.verb];
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) return { ok: false, message: `unknown field ${quote(k)} in a ${inc.verb} request` };
  }
  // Point names are checked on the raw own keys, before zod: zod's record silently skips a
  // `__proto__` key, which would let `{"a":1,"__proto__":{...}}` through with a key lost.
  const set = own(obj, "set");
  if (inc.verb === "command" && typeof set === "object" && set !== null && !Array.isArray(set)) {
    const bad = Object.keys(set).find((k) => !isPointName(k));
    if (bad !== undefined) return { ok: false, message: badPointMessage(bad) };
  }
  const result = schemas[inc.verb].safeParse(obj);
  if (!result.success) {
    const issue = result.error.issues[0];
    return { ok: false, message: issue ? issueMessage(obj, issue, msgs) : "the request is invalid" };
  }
  // Zod saw numbers; the text decides whether they were written as exact integers.
  for (const f of INTEGER_FIELDS) {
    const raw = scan.rootNumbers.get(f);
    if (raw === undefined) continue; // absent (optional) or already refused as a non-number
    const v = obj[f];
    if (!INTEGER_LITERAL_RE.test(raw) || typeof v !== "number" || BigInt(raw) !== BigInt(v)) {
      return { ok: false, message: msgs[f] ?? `${f} is invalid` };
    }
  }
  return { ok: true, request: build(inc, obj) };
}

function build(inc: IncomingRequest, obj: Record<string, unknown>): Request {
  const { actuator } = inc;
  const id = obj.id as string;
  const str = (k: string) => obj[k] as string;
  const num = (k: string) => (obj[k] as number) + 0; // + 0 turns -0 into 0
  switch (inc.verb) {
    case "lease/acquire":
      return { verb: inc.verb, actuator, id, holder: str("holder"), ttlMs: num("ttlMs") };
    case "lease/renew":
    case "lease/release":
      return {
        verb: inc.verb,
        actuator,
        id,
        holder: str("holder"),
        token: num("token"),
        mac: hasOwn(obj, "mac") ? str("mac") : null,
        counter: hasOwn(obj, "counter") ? num("counter") : null,
      };
    case "command": {
      const set: Record<string, number> = {};
      // Safe: every name passed isPointName and is not an Object.prototype member.
      const given = obj.set as Record<string, number>;
      for (const k of Object.keys(given)) set[k] = given[k] as number;
      return {
        verb: inc.verb,
        actuator,
        id,
        holder: str("holder"),
        token: num("token"),
        seq: num("seq"),
        set,
        deadlineMs: hasOwn(obj, "deadlineMs") ? num("deadlineMs") : inc.limits.defaultDeadlineMs,
        mac: hasOwn(obj, "mac") ? str("mac") : null,
      };
    }
    case "read":
      return { verb: inc.verb, actuator, id, holder: hasOwn(obj, "holder") ? str("holder") : null };
  }
}

/** The route without a Response Topic: `B/A/reply/H`, or `B/A/reply/_` for a read with no holder key. */
function holderRoute(inc: IncomingRequest, obj: Record<string, unknown>): ReplyRoute | null {
  if (inc.verb === "read" && !hasOwn(obj, "holder")) {
    return { kind: "holderTopic", holderTopic: replyTopic(inc.base, inc.actuator, undefined) };
  }
  const holder = own(obj, "holder");
  if (typeof holder === "string" && HOLDER_PATTERN.test(holder)) {
    return { kind: "holderTopic", holderTopic: replyTopic(inc.base, inc.actuator, holder) };
  }
  return null;
}

/** Why the request's Response Topic or Correlation Data cannot carry the reply, or null. */
function responseProblem(inc: IncomingRequest): string | null {
  if (inc.responseTopic === undefined) return null;
  const problem = responseTopicProblem(inc.base, inc.responseTopic);
  if (problem !== null) return problem;
  const size = inc.correlationData?.byteLength ?? 0;
  return size > MAX_CORRELATION_DATA_BYTES
    ? `the correlation data is ${size} bytes long; at most ${MAX_CORRELATION_DATA_BYTES} are allowed`
    : null;
}

/**
 * Parses one incoming request. Never throws on any payload; see the module comment for the
 * order of checks.
 */
export function parseRequest(inc: IncomingRequest): ParseResult {
  const size = inc.payload.byteLength;
  if (size > inc.limits.maxPayloadBytes) {
    return {
      kind: "unanswerable",
      cause: "TOO_LARGE",
      reason: `the payload is ${size} bytes, over the limit of ${inc.limits.maxPayloadBytes}`,
    };
  }
  let text: string;
  try {
    text = decoder.decode(inc.payload);
  } catch {
    return { kind: "unanswerable", cause: "NOT_UTF8", reason: "the payload is not valid UTF-8" };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: "unanswerable", cause: "NOT_JSON", reason: "the payload is not valid JSON" };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { kind: "unanswerable", cause: "NOT_OBJECT", reason: "the payload is not a JSON object" };
  }
  const obj = value as Record<string, unknown>;
  const id = own(obj, "id");
  if (typeof id !== "string" || !REQUEST_ID_PATTERN.test(id)) {
    return { kind: "unanswerable", cause: "NO_ID", reason: "the id is missing or is not 1 to 128 printable ASCII characters" };
  }
  const problem = responseProblem(inc);
  const route: ReplyRoute | null =
    inc.responseTopic !== undefined && problem === null
      ? {
          kind: "responseTopic",
          responseTopic: inc.responseTopic,
          ...(inc.correlationData === undefined ? {} : { correlationData: inc.correlationData }),
        }
      : holderRoute(inc, obj);
  if (route === null) {
    return {
      kind: "unanswerable",
      cause: "NO_ROUTE",
      reason:
        problem === null
          ? "the request has no response topic and no valid holder, so there is nowhere to reply"
          : `the request cannot be answered where it asks (${problem}) and has no valid holder to reply to instead`,
    };
  }
  const overBudget = inc.admit?.(own(obj, "holder"), own(obj, "token")) ?? null;
  if (overBudget?.drop) return { kind: "unanswerable", cause: "OVER_BUDGET", reason: overBudget.message };
  if (overBudget) return { kind: "refused", code: "OVERLOADED", message: overBudget.message, id, route };
  if (problem !== null) return { kind: "refused", code: "INVALID_REQUEST", message: problem, id, route };
  const checked = validate(inc, obj, scanJson(text));
  if (!checked.ok) return { kind: "refused", code: "INVALID_REQUEST", message: checked.message, id, route };
  if (inc.retain) {
    return {
      kind: "refused",
      code: "RETAINED_REQUEST",
      message: "the request was published with the retain flag set, and a retained request is stale by definition",
      id,
      route,
    };
  }
  return { kind: "request", request: checked.request, route };
}
