/**
 * Topic names of the MQTT API v1 (docs/mqtt-api.md): parsing request topics and
 * building the gateway's reply, state, event and status topics. Pure string work.
 */

/** `A`: an actuator id. */
export const ACTUATOR_ID_RE = /^[a-z0-9][a-z0-9_-]{0,63}$/;
/** `H`: a holder id (the controller). */
export const HOLDER_RE = /^[A-Za-z0-9._:-]{1,128}$/;

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
  return ACTUATOR_ID_RE.test(s);
}

export function isHolderId(s: string): boolean {
  return HOLDER_RE.test(s);
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

/** The filters the gateway subscribes to (QoS 1) to receive every request. */
export function requestSubscriptions(base: string): readonly string[] {
  return [`${base}/+/lease/+`, `${base}/+/command`, `${base}/+/read`];
}

/**
 * Whether `s` may be used as an MQTT topic name to publish to: non-empty, no wildcard
 * (`+`, `#`), no U+0000, at most 65535 UTF-8 bytes (MQTT 5 §4.7, §1.5.4).
 */
export function isPublishableTopic(s: string): boolean {
  return (
    s.length > 0 &&
    !/[+#\u0000]/.test(s) &&
    !/[\uD800-\uDFFF]/.test(s.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, "")) &&
    Buffer.byteLength(s, "utf8") <= 65_535
  );
}
