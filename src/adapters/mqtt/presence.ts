/**
 * Who else is on the broker with this gatewayId. Two daemons with one gatewayId share one
 * MQTT client id, and the broker disconnects the older connection whenever the other one
 * connects: both keep reconnecting, both answer for the same actuators, each believes its
 * own fences. A newcomer must find out before it takes the id, so it asks first from a
 * connection of its own: every gateway answers a `read` on `B/gateway/read` (the reserved
 * actuator id "gateway") with its identity. A running gateway that is displaced anyway (a
 * newcomer that did not ask) learns it from MQTT 5's DISCONNECT reason 0x8E (session taken
 * over); see MqttLink.
 */
import { createHash, randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { resolve } from "node:path";
import { MqttClient } from "mqtt";
import type { MqttConfig } from "../../config/schema.ts";
import { streamBuilder } from "./link.ts";
import type { GatewayIdentity } from "./payloads.ts";
import { GATEWAY_LEVEL, HOLDER_RE, gatewayStatusTopic } from "./topics.ts";

export function identityOf(gatewayId: string, journalPath: string, pid = process.pid): GatewayIdentity {
  const host = hostname();
  const instance = createHash("sha256").update(`${host}\u0000${resolve(journalPath)}`).digest("hex").slice(0, 16);
  return { id: gatewayId, instance, host, pid };
}

export type ProbeResult =
  | { readonly kind: "answered"; readonly gateways: readonly GatewayIdentity[]; readonly statusOnline: boolean }
  | { readonly kind: "unreachable"; readonly reason: string };

export interface ProbeOptions {
  /** The gatewayId whose retained status decides how long to wait for answers. */
  readonly gatewayId: string;
  readonly connectTimeoutMs?: number;
  /**
   * How long to wait for answers when that gateway's retained status says `online` (a
   * live gateway answers in milliseconds; a stale `online`, a half-open connection the
   * broker has not timed out yet, never answers). With no such status nobody with that id
   * is connected, and the probe ends at once.
   */
  readonly answerWaitMs?: number;
  /** Wait the whole answerWaitMs (to find two), not only until the first answer with that id. */
  readonly waitForAll?: boolean;
}

/**
 * Asks every gateway on the broker who it is, from a connection with a client id of its
 * own (never the gateway's: that would displace a running one).
 */
export async function probeGateways(mqtt: MqttConfig, options: ProbeOptions): Promise<ProbeResult> {
  const base = mqtt.baseTopic;
  const nonce = randomUUID();
  const holder = mqtt.username !== undefined && HOLDER_RE.test(mqtt.username) ? mqtt.username : "fencegate-probe";
  const v5 = mqtt.protocolVersion === 5;
  // Topics the shipped ACL lets a gateway's user read and write (config/mosquitto/acl).
  const replyTopic = v5 ? `${base}/_client/${holder}/${nonce}` : `${base}/${GATEWAY_LEVEL}/reply/${holder}`;
  const statusTopic = gatewayStatusTopic(base, options.gatewayId);
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
    let statusOnline = false;
    let answered: (() => void) | null = null;
    client.on("message", (topic, payload, packet) => {
      if (topic === statusTopic) statusOnline = ["online", "active", "standby"].includes(payload.toString()); // a gateway group's members say their role
      if (topic !== replyTopic) return;
      const body = parseAnswer(payload.toString(), v5 ? packet.properties?.correlationData?.toString() : undefined, nonce);
      if (body === null) return;
      gateways.push(body);
      if (body.id === options.gatewayId && options.waitForAll !== true) answered?.();
    });
    await client.subscribeAsync([statusTopic, replyTopic], { qos: 1 });
    const request = JSON.stringify({ id: nonce, holder });
    // Acknowledged after the broker handled it, and after the retained status it sent on subscribing.
    await client.publishAsync(`${base}/${GATEWAY_LEVEL}/read`, request, { qos: 1, ...(v5 ? { properties: { responseTopic: replyTopic, correlationData: Buffer.from(nonce) } } : {}) });
    if (statusOnline && !gateways.some((g) => g.id === options.gatewayId)) {
      await new Promise<void>((done) => {
        const timer = setTimeout(done, options.answerWaitMs ?? 1500);
        answered = () => {
          clearTimeout(timer);
          done();
        };
      });
    }
    return { kind: "answered", gateways, statusOnline };
  } catch (err) {
    return { kind: "unreachable", reason: (err as Error).message };
  } finally {
    await client.endAsync(true).catch(() => {});
  }
}

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
  if (typeof g["id"] !== "string" || typeof g["instance"] !== "string" || typeof g["host"] !== "string" || typeof g["pid"] !== "number") return null;
  return { id: g["id"], instance: g["instance"], host: g["host"], pid: g["pid"] };
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

/** Another gateway than `self` that answered with `self.id`, if any. */
export function duplicateOf(result: ProbeResult, self: GatewayIdentity): GatewayIdentity | undefined {
  if (result.kind !== "answered") return undefined;
  return result.gateways.find((g) => g.id === self.id && !(g.instance === self.instance && g.pid === self.pid));
}

/** The sentence a running gateway stops with when another connection took its client id. */
export function displacedSentence(gatewayId: string, clientId: string, by: GatewayIdentity | undefined): string {
  const who = by === undefined ? `another fencegate with gatewayId "${gatewayId}" started without seeing this one, or another client uses that id` : `another fencegate with gatewayId "${gatewayId}" has it (host ${by.host}, pid ${by.pid})`;
  return `The broker gave this gateway's MQTT client id "${clientId}" to another connection: ${who}. Stopping, so that the two do not take the id from each other forever; give each gateway its own gatewayId.`;
}
