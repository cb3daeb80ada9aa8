/**
 * Who else is on the broker with this gatewayId. Two daemons with one gatewayId share one
 * MQTT client id, and the broker disconnects the older connection whenever the other one
 * connects: both keep reconnecting, both answer for the same actuators, each believes its
 * own fences. A newcomer must find out before it takes the id, so it asks first from a
 * connection of its own: every gateway answers a `read` on `B/gateway/read` (the reserved
 * actuator id "gateway") with its identity. A running gateway that is displaced anyway (a
 * newcomer that did not ask) asks again once the broker closed its connection; see MqttLink.
 */
import { createHash, randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { resolve } from "node:path";
import { MqttClient } from "mqtt";
import { streamBuilder, type BrokerOptions } from "./link.ts";
import {
  GATEWAY_LEVEL,
  type GatewayIdentity,
  HOLDER_PATTERN,
  clientReplyTopic,
  gatewayStatusTopic,
  isActuatorId,
  replyTopic,
} from "../../../packages/protocol/src/index.ts";

export function identityOf(
  gatewayId: string,
  journalPath: string,
  serves: { readonly actuators?: readonly string[]; readonly group?: string | undefined } = {},
  pid = process.pid,
): GatewayIdentity {
  const host = hostname();
  const instance = createHash("sha256")
    .update(`${host}\u0000${resolve(journalPath)}`)
    .digest("hex")
    .slice(0, 16);
  return {
    id: gatewayId,
    instance,
    host,
    pid,
    ...(serves.actuators ? { actuators: serves.actuators } : {}),
    ...(serves.group !== undefined ? { group: serves.group } : {}),
  };
}

export type ProbeResult =
  { readonly kind: "answered"; readonly gateways: readonly GatewayIdentity[] } | { readonly kind: "unreachable"; readonly reason: string };

export interface ProbeOptions {
  readonly connectTimeoutMs?: number;
  /**
   * How long to wait for answers while a gateway whose retained status says `online` has
   * not answered (a live gateway answers in milliseconds; a stale `online`, a half-open
   * connection the broker has not timed out yet, never answers). With no such status
   * nobody is connected, and the probe ends at once.
   */
  readonly answerWaitMs?: number;
  /** Wait the whole answerWaitMs (to find two with one id), not only until every gateway said online answered. */
  readonly waitForAll?: boolean;
}

/**
 * Asks every gateway on the broker who it is, from a connection with a client id of its
 * own (never the gateway's: that would displace a running one).
 */
export async function probeGateways(mqtt: BrokerOptions, options: ProbeOptions = {}): Promise<ProbeResult> {
  const base = mqtt.baseTopic;
  const nonce = randomUUID();
  const holder = mqtt.username !== undefined && HOLDER_PATTERN.test(mqtt.username) ? mqtt.username : "fencegate-probe";
  const v5 = mqtt.protocolVersion === 5;
  // Topics the shipped ACL lets a gateway's user read and write (config/mosquitto/acl).
  const replyTo = v5 ? clientReplyTopic(base, holder, nonce) : replyTopic(base, GATEWAY_LEVEL, holder);
  const statusFilter = gatewayStatusTopic(base, "+");
  const client = new MqttClient(streamBuilder(mqtt), {
    protocolVersion: mqtt.protocolVersion,
    clientId: `${mqtt.clientId.slice(0, 100)}-probe-${nonce.slice(0, 8)}`,
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: options.connectTimeoutMs ?? 5000,
    // mqtt-packet's cache of 65,536 number Buffers is per process and built by the first
    // client that writes with it: this probe writes before the link does (see link.ts).
    writeCache: false,
    ...(process.env["DEBUG"] ? {} : { log: () => {} }),
    ...(mqtt.username !== undefined ? { username: mqtt.username } : {}),
    ...(mqtt.password !== undefined ? { password: mqtt.password } : {}),
  });
  try {
    const connected = await new Promise<string | null>((done) => {
      client.once("connect", () => done(null));
      client.once("error", (err) => done(err.message));
      client.once("close", () => done("the connection closed"));
    });
    if (connected !== null) return { kind: "unreachable", reason: connected };
    const gateways: GatewayIdentity[] = [];
    const online = new Set<string>();
    const unanswered = () => [...online].filter((id) => !gateways.some((g) => g.id === id));
    let answered: (() => void) | null = null;
    client.on("message", (topic, payload, packet) => {
      const level =
        topic.startsWith(`${base}/${GATEWAY_LEVEL}/`) && topic.endsWith("/status")
          ? topic.slice(base.length + GATEWAY_LEVEL.length + 2, -"/status".length)
          : null;
      if (level !== null && !level.includes("/")) {
        // A gateway group's members say their role.
        if (["online", "active", "standby"].includes(payload.toString())) online.add(level);
        else online.delete(level);
      }
      if (topic !== replyTo) return;
      const body = parseAnswer(payload.toString(), v5 ? packet.properties?.correlationData?.toString() : undefined, nonce);
      if (body === null || gateways.length >= MAX_ANSWERS) return;
      gateways.push(body);
      if (options.waitForAll !== true && unanswered().length === 0) answered?.();
    });
    await client.subscribeAsync([statusFilter, replyTo], { qos: 1 });
    const request = JSON.stringify({ id: nonce, holder });
    // Acknowledged after the broker handled it, and after the retained status it sent on subscribing.
    await client.publishAsync(`${base}/${GATEWAY_LEVEL}/read`, request, {
      qos: 1,
      ...(v5 ? { properties: { responseTopic: replyTo, correlationData: Buffer.from(nonce) } } : {}),
    });
    if (unanswered().length > 0 || (options.waitForAll === true && online.size > 0)) {
      await new Promise<void>((done) => {
        const timer = setTimeout(done, options.answerWaitMs ?? 1500);
        answered = () => {
          clearTimeout(timer);
          done();
        };
      });
    }
    return { kind: "answered", gateways };
  } catch (err) {
    return { kind: "unreachable", reason: (err as Error).message };
  } finally {
    await client.endAsync(true).catch(() => {});
  }
}

/** The most answers one probe keeps: far more gateways than one broker serves, and a bound on what others can make it hold. */
const MAX_ANSWERS = 1024;

function parseAnswer(text: string, correlation: string | undefined, nonce: string): GatewayIdentity | null {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof body !== "object" || body === null) return null;
  const { id, ok, gateway } = body as { id?: unknown; ok?: unknown; gateway?: unknown };
  if ((correlation ?? id) !== nonce || ok !== true || typeof gateway !== "object" || gateway === null) return null;
  const g = gateway as Record<string, unknown>;
  if (typeof g["id"] !== "string" || typeof g["instance"] !== "string" || typeof g["host"] !== "string" || typeof g["pid"] !== "number")
    return null;
  const actuators = Array.isArray(g["actuators"])
    ? g["actuators"].filter((a): a is string => typeof a === "string" && isActuatorId(a))
    : undefined;
  const group = typeof g["group"] === "string" ? g["group"] : undefined;
  return {
    id: g["id"],
    instance: g["instance"],
    host: g["host"],
    pid: g["pid"],
    ...(actuators ? { actuators } : {}),
    ...(group !== undefined ? { group } : {}),
  };
}

/** Another gateway with this gatewayId is connected: this one must not take the id. */
export class DuplicateGatewayError extends Error {
  override readonly name = "DuplicateGatewayError";
  constructor(gatewayId: string, other: GatewayIdentity, broker: string) {
    super(
      `Another fencegate with gatewayId "${gatewayId}" is connected to ${broker} (host ${other.host}, pid ${other.pid}): two gateways with one id take each other's MQTT client id and both answer for the same actuators. Give this one its own gatewayId, or stop the other one.`,
    );
  }
}

/**
 * Another gateway on the base topic serves one of this one's actuator ids: both would
 * answer its requests (two grants for one acquire), and whichever stops last hides the
 * other behind its retained offline state.
 */
export class ActuatorConflictError extends Error {
  override readonly name = "ActuatorConflictError";
  constructor(self: GatewayIdentity, other: GatewayIdentity, actuators: readonly string[], broker: string) {
    super(
      `Gateway "${other.id}" (host ${other.host}, pid ${other.pid}) on ${broker} already serves ${actuators.map((a) => `"${a}"`).join(", ")}, which gateway "${self.id}" serves too: two gateways answering for one actuator grant it twice. Give each actuator one gateway (rename it here or remove it from one of them), or make both members of one gateway group.`,
    );
  }
}

/** Another gateway (another gatewayId, not of this one's group) that answered serving one of `self`'s actuators, with the ids both serve. */
export function actuatorConflictOf(
  result: ProbeResult,
  self: GatewayIdentity,
): { other: GatewayIdentity; actuators: string[] } | undefined {
  const mine = new Set(self.actuators ?? []);
  for (const other of othersThan(result, self)) {
    const shared = (other.actuators ?? []).filter((a) => mine.has(a));
    if (shared.length > 0) return { other, actuators: shared };
  }
  return undefined;
}

/** The gateways that answered other than `self` and the members of its group. */
function othersThan(result: ProbeResult, self: GatewayIdentity): GatewayIdentity[] {
  if (result.kind !== "answered") return [];
  return result.gateways.filter((other) => other.id !== self.id && (self.group === undefined || other.group !== self.group));
}

/** The actuators gateways other than `self` (and its group) serve: never said to be unserved here. */
export function actuatorsServedByOthers(result: ProbeResult, self: GatewayIdentity): string[] {
  return othersThan(result, self).flatMap((other) => other.actuators ?? []);
}

/** Another gateway than `self` that answered with `self.id`, if any. */
export function duplicateOf(result: ProbeResult, self: GatewayIdentity): GatewayIdentity | undefined {
  if (result.kind !== "answered") return undefined;
  return result.gateways.find((g) => g.id === self.id && !(g.instance === self.instance && g.pid === self.pid));
}

/** The sentence a running gateway stops with when another gateway with its id took its client id. */
export function displacedSentence(gatewayId: string, clientId: string, by: GatewayIdentity): string {
  return `The broker gave this gateway's MQTT client id "${clientId}" to another connection: another fencegate with gatewayId "${gatewayId}" has it (host ${by.host}, pid ${by.pid}). Stopping, so that the two do not take the id from each other forever; give each gateway its own gatewayId.`;
}
