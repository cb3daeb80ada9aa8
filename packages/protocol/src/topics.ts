/**
 * Topic names of the MQTT API v1 (docs/mqtt-api.md): parsing request topics and
 * building the gateway's reply, state, event and status topics. Pure string work.
 */

import { ACTUATOR_PATTERN, HOLDER_PATTERN } from "./names.ts";

export const REQUEST_VERBS = ["lease/acquire", "lease/renew", "lease/release", "command", "read"] as const;
export type RequestVerb = (typeof REQUEST_VERBS)[number];

export interface RequestTopic {
  /**
   * The actuator level of the topic, as received. It is NOT checked here: a request whose
   * actuator id is malformed is still a request (refused by `parseRequest` with
   * `INVALID_REQUEST`, which ranks before `UNKNOWN_ACTUATOR`).
   */
  readonly actuator: string;
  readonly verb: RequestVerb;
}

export function isActuatorId(s: string): boolean {
  return ACTUATOR_PATTERN.test(s);
}

export function isHolderId(s: string): boolean {
  return HOLDER_PATTERN.test(s);
}

/**
 * `B/A/lease/{acquire,renew,release}`, `B/A/command` or `B/A/read` → the actuator level and
 * the verb; anything else (other topics, unknown lease verbs, extra levels) → `null`.
 * `base` may have several levels (`site/fencegate`).
 */
export function parseRequestTopic(base: string, topic: string): RequestTopic | null {
  const prefix = `${base}/`;
  if (!topic.startsWith(prefix)) return null;
  const levels = topic.slice(prefix.length).split("/");
  const actuator = levels[0];
  if (actuator === undefined) return null;
  const verb = levels.slice(1).join("/");
  if (!(REQUEST_VERBS as readonly string[]).includes(verb)) return null;
  return { actuator, verb: verb as RequestVerb };
}

/** `B/A/lease/acquire`, `B/A/command`, ...: where a controller publishes a request. */
export function requestTopic(base: string, actuator: string, verb: RequestVerb): string {
  return `${base}/${actuator}/${verb}`;
}

/**
 * A v5 controller's own reply topic, `B/_client/H/<nonce>`: outside every gateway's own
 * topics, so a gateway replies there (see responseTopicProblem).
 */
export function clientReplyTopic(base: string, holder: string, nonce: string): string {
  return `${base}/_client/${holder}/${nonce}`;
}

/** The fallback reply topic: `B/A/reply/H`, or `B/A/reply/_` for a `read` without holder. */
export function replyTopic(base: string, actuator: string, holder: string | undefined): string {
  return `${base}/${actuator}/reply/${holder ?? "_"}`;
}

/** `B/A/state`: retained, published on every change. */
export function stateTopic(base: string, actuator: string): string {
  return `${base}/${actuator}/state`;
}

/** `B/A/events`: one non-retained JSON object per decision. */
export function eventsTopic(base: string, actuator: string): string {
  return `${base}/${actuator}/events`;
}

/**
 * The topic level of the gateways themselves: `B/gateway/<gatewayId>/status`, and
 * `B/gateway/read`, which every gateway answers with its identity. Reserved as an actuator id.
 */
export const GATEWAY_LEVEL = "gateway";

/** `B/gateway/<gatewayId>/status`: retained `online` / `offline` (also the last will). */
export function gatewayStatusTopic(base: string, gatewayId: string): string {
  return `${base}/gateway/${gatewayId}/status`;
}

/**
 * `B/gateway/<gatewayId>/actuators`: retained, the actuator ids the gateway serves
 * (payloads.ts, directoryPayload). What a client says "no such actuator" from: a gateway
 * hears no request for an actuator it does not serve, so none answers for it.
 */
export function gatewayActuatorsTopic(base: string, gatewayId: string): string {
  return `${base}/gateway/${gatewayId}/actuators`;
}

/** The filters matching every request topic under `B`, whichever gateway serves it. */
export function requestSubscriptions(base: string): readonly string[] {
  return [`${base}/+/lease/+`, `${base}/+/command`, `${base}/+/read`];
}

/**
 * The filters a gateway subscribes to (QoS 1): the requests of its own actuators only.
 * Several gateways share a broker and a base topic; one that heard every actuator's
 * requests would refuse the others' UNKNOWN_ACTUATOR, and that refusal, needing no device,
 * came before the real answer (docs/mqtt-api.md, "Several gateways on one broker").
 */
export function actuatorRequestSubscriptions(base: string, actuators: readonly string[]): readonly string[] {
  return actuators.flatMap((a) => [`${base}/${a}/lease/+`, `${base}/${a}/command`, `${base}/${a}/read`]);
}

/** The longest v5 Response Topic the gateway replies to, in UTF-8 bytes. */
export const MAX_RESPONSE_TOPIC_BYTES = 1024;
/**
 * The most levels a v5 Response Topic may have: well inside what brokers accept (Mosquitto
 * 2.0 disconnects a client that publishes to more than 201 levels; EMQX refuses more than
 * 128 by default), and far more than any reply scheme needs.
 */
export const MAX_RESPONSE_TOPIC_LEVELS = 32;

/**
 * The first code point a broker refuses in a topic name (Mosquitto 2.0 disconnects the
 * publisher), or null: NUL and the other C0 controls, DEL and the C1 controls, the
 * non-characters U+FDD0..U+FDEF and U+xFFFE/U+xFFFF, and a UTF-16 surrogate standing
 * alone (it has no UTF-8 encoding).
 */
function refusedCodePoint(topic: string): number | null {
  for (const ch of topic) {
    const cp = ch.codePointAt(0) ?? 0;
    const control = cp <= 0x1f || (cp >= 0x7f && cp <= 0x9f);
    const nonCharacter = (cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) === 0xfffe;
    if (control || nonCharacter || (cp >= 0xd800 && cp <= 0xdfff)) return cp;
  }
  return null;
}

/**
 * The topics the gateway serves or publishes under `B/`: requests, states, events and the
 * gateway status. A reply published there would pass for one of them (a non-retained
 * "state" to a watcher, a request to the gateway itself), with the gateway's rights, which
 * a broker ACL cannot take away because the gateway needs them.
 */
function ownTopicFilters(base: string): readonly string[] {
  return [...requestSubscriptions(base), `${base}/+/state`, `${base}/+/events`, `${base}/gateway/#`];
}

/** ownTopicFilters(base), each split into its levels once (every request with a response topic is checked against them); one entry per base topic. */
const ownFilterLevels = new Map<string, readonly (readonly string[])[]>();
function ownTopicFilterLevels(base: string): readonly (readonly string[])[] {
  let levels = ownFilterLevels.get(base);
  if (levels === undefined) {
    levels = ownTopicFilters(base).map((f) => f.split("/"));
    ownFilterLevels.set(base, levels);
  }
  return levels;
}

/** Whether `topic` matches the MQTT topic filter `filter` (`+` one level, `#` the rest). */
export function topicMatches(filter: string, topic: string): boolean {
  return levelsMatch(filter.split("/"), topic.split("/"));
}

function levelsMatch(f: readonly string[], t: readonly string[]): boolean {
  for (let i = 0; i < f.length; i++) {
    if (f[i] === "#") return true;
    if (i >= t.length || (f[i] !== "+" && f[i] !== t[i])) return false;
  }
  return f.length === t.length;
}

/**
 * Why the gateway will not publish a reply to `topic`, a v5 Response Topic chosen by the
 * requester, as one sentence naming the problem; null if it may. Refused: what the broker
 * would refuse (and disconnect the gateway for, again on every reconnect while the reply is
 * re-sent): empty, wildcards, forbidden code points, too long or too many levels; `$`
 * topics (the broker's own); and the gateway's own topics under `B/` (see ownTopicFilters).
 */
export function responseTopicProblem(base: string, topic: string): string | null {
  if (topic.length === 0) return "the response topic is empty";
  const bytes = Buffer.byteLength(topic, "utf8");
  if (bytes > MAX_RESPONSE_TOPIC_BYTES) return `the response topic is ${bytes} bytes long; at most ${MAX_RESPONSE_TOPIC_BYTES} are allowed`;
  const levels = topic.split("/");
  if (levels.length > MAX_RESPONSE_TOPIC_LEVELS)
    return `the response topic has ${levels.length} levels; at most ${MAX_RESPONSE_TOPIC_LEVELS} are allowed`;
  if (/[+#]/.test(topic)) return "the response topic contains a wildcard ('+' or '#'); a reply cannot be published to it";
  const refused = refusedCodePoint(topic);
  if (refused !== null)
    return `the response topic contains U+${refused.toString(16).toUpperCase().padStart(4, "0")}, a character brokers refuse in a topic`;
  // Mosquitto, for one, takes commands on $CONTROL/: never publish there with the gateway's rights.
  if (topic.startsWith("$")) return "the response topic starts with '$', which brokers reserve for their own topics";
  if (ownTopicFilterLevels(base).some((f) => levelsMatch(f, levels))) {
    return `the response topic is one of the gateway's own topics (requests, state, events or status under ${base}/); reply topics may be ${base}/<actuator>/reply/..., ${base}/_client/... or outside ${base}/`;
  }
  return null;
}
