/**
 * The gateway's MQTT connection: receives requests, hands them to the shell, and carries
 * the shell's replies, events and retained states out, as docs/mqtt-api.md says.
 *
 * - Clean session (v5: session expiry 0): a broker-queued backlog from an earlier session
 *   is never replayed into the actuators.
 * - TCP_NODELAY from the first byte: with Nagle and delayed ACK a request/reply round trip
 *   costs ~88 ms instead of ~0.2 ms.
 * - Last will `offline` on the gateway status topic; `online` once connected.
 * - Reconnects with exponential backoff; every actuator's state is re-published on connect.
 * - A reply the broker has not acknowledged when the connection drops is dropped, not
 *   re-sent (see dropUnacknowledgedReplies).
 */
import { readFileSync } from "node:fs";
import net from "node:net";
import type { Writable } from "node:stream";
import tls from "node:tls";
import { MqttClient, type IClientOptions, type IClientPublishOptions, type IPublishPacket, type PacketCallback } from "mqtt";
import type { Logger } from "pino";
import type { CoreEvent } from "../../core/types.ts";
import {
  GATEWAY_LEVEL,
  type GatewayIdentity,
  type GatewayRequest,
  type GatewayRole,
  actuatorRequestSubscriptions,
  eventsTopic,
  gatewayActuatorsTopic,
  gatewayStatusTopic,
  parseRequestTopic,
  stateTopic,
} from "../../../packages/protocol/src/index.ts";
import type { OutboundReply, Outbox, StateView } from "../../shell/ports.ts";
import { GuardedStream, maxPacketBytes, pubackPacket, type DroppedPacket } from "./packet-guard.ts";
import {
  directoryPayload,
  eventPayload,
  gatewayStatusPayload,
  identityReplyPayload,
  readReplyPayload,
  refusalPayload,
  replyPayload,
  statePayload,
} from "./payloads.ts";
import { RequestBudgets, type BudgetLimits } from "./request-budgets.ts";
import { parseRequest, type ReplyRoute, type Request, type RequestLimits } from "./requests.ts";

/** What the link needs from the shell. */
export interface RequestSink {
  allocateRef(): number;
  submit(actuator: string, ref: number, request: GatewayRequest): void;
  actuatorIds(): string[];
  view(actuator: string): StateView | undefined;
  /** The live lease's holder and token, null without one, undefined for an actuator not served here: cheap, asked per request. */
  liveLease(actuator: string): { readonly holder: string; readonly token: number } | null | undefined;
}

export interface MqttLinkOptions {
  readonly mqtt: BrokerOptions;
  readonly gatewayId: string;
  /** Answered to `B/gateway/read`: how a newcomer with the same gatewayId finds this one (presence.ts). */
  readonly identity: GatewayIdentity;
  /**
   * Whether another gateway with this gatewayId is connected now (presence.ts), asked after
   * the broker closed the connection: Mosquitto 2.0 closes the older of two connections
   * with one client id without saying why.
   */
  readonly otherWithSameId?: () => Promise<GatewayIdentity | undefined>;
  /** Another gateway with our gatewayId took our client id: the link has stopped for good. */
  readonly onDisplaced?: (by: GatewayIdentity) => void;
  readonly limits: RequestLimits;
  readonly log: Logger;
  /** Reads of one actuator awaiting their reply; beyond this a read of it is refused OVERLOADED at the door. */
  readonly maxPendingReadsPerActuator: number;
  /** Lease requests and commands of one actuator awaiting their reply; beyond this one is refused OVERLOADED at the door. */
  readonly maxPendingRequestsPerActuator: number;
  /** A gateway group member's starting role (a standby takes no requests); none for a gateway on its own. */
  readonly role?: GatewayRole;
  /** Told of each request refused or dropped here, before the shell (for /metrics and the log's summary of refusals). */
  readonly onRefused?: (actuator: string, holder: string | null, code: string) => void;
  /** The rate budgets of requesters other than the lease holder (request-budgets.ts). */
  readonly budgets: BudgetLimits;
  /** Retained states of actuators nothing serves (src/shell/unserved.ts), published with the served ones on every connection. */
  readonly unservedStates?: () => readonly StateView[];
}

/**
 * Reads of one actuator awaiting their reply. Concurrent reads share one poll of the device,
 * so more of them cost no bus time, only memory: each holds its reply route (id, response
 * topic and correlation data, up to about 2 KiB).
 */
export const MAX_PENDING_READS_PER_ACTUATOR = 64;
/**
 * Lease requests of one actuator awaiting their reply, on top of the commands its queue
 * holds (queueLimit waiting and one at the device, which the core itself answers
 * OVERLOADED beyond): room for a burst of acquires and renewals while a grant commits.
 */
export const LEASE_REQUEST_ROOM_PER_ACTUATOR = 32;

/**
 * Which per-actuator budget of replies owed a request counts against: reads apart, so no
 * flood of them takes the room of leases and commands, and the live holder's apart, so no
 * one else's takes its room (docs/mqtt-api.md, "OVERLOADED at the door").
 */
type PendingKind = "reads" | "requests" | "holder";

/** The broker and how to reach it: a configuration's `mqtt` section is one (src/config/schema.ts). */
export interface BrokerOptions {
  readonly url: string;
  readonly clientId: string;
  readonly protocolVersion: 4 | 5;
  readonly baseTopic: string;
  readonly username?: string | undefined;
  readonly password?: string | undefined;
  /** For mqtts:// urls: PEM files, and whether the broker's certificate must verify. */
  readonly tls?:
    | {
        readonly caFile?: string | undefined;
        readonly certFile?: string | undefined;
        readonly keyFile?: string | undefined;
        readonly rejectUnauthorized: boolean;
      }
    | undefined;
  readonly keepaliveS: number;
  readonly reconnect: { readonly minMs: number; readonly maxMs: number };
  /** Larger requests are dropped unread. */
  readonly maxPayloadBytes: number;
}

export interface MqttLinkCounters {
  requests: number;
  unanswerable: Map<string, number>;
  refusedAtEdge: Map<string, number>;
}

/** The socket (TCP, or TLS with the configured CA and client certificate) for `mqtt.url`, Nagle off. */
export function streamBuilder(mqtt: BrokerOptions): () => net.Socket {
  const url = new URL(mqtt.url);
  const secure = url.protocol === "mqtts:";
  const port = Number(url.port || (secure ? 8883 : 1883));
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  if (!secure) return () => net.createConnection({ host, port, noDelay: true });
  const t = mqtt.tls;
  const options: tls.ConnectionOptions = {
    host,
    port,
    servername: net.isIP(host) ? undefined : host,
    rejectUnauthorized: t?.rejectUnauthorized ?? true,
    ...(t?.caFile ? { ca: readFileSync(t.caFile) } : {}),
    ...(t?.certFile ? { cert: readFileSync(t.certFile) } : {}),
    ...(t?.keyFile ? { key: readFileSync(t.keyFile) } : {}),
  };
  return () => {
    const socket = tls.connect(options);
    socket.setNoDelay(true);
    return socket;
  };
}

export class MqttLink implements Outbox {
  private client: MqttClient | null = null;
  private sink: RequestSink | null = null;
  private readonly routes = new Map<number, { id: string; route: ReplyRoute; actuator: string; kind: PendingKind }>();
  /** Replies owed per actuator and kind (entries vanish at zero). */
  private readonly pending = new Map<string, Record<PendingKind, number>>();
  private reconnectMs: number;
  readonly counters: MqttLinkCounters = { requests: 0, unanswerable: new Map(), refusedAtEdge: new Map() };
  private readonly base: string;
  private readonly v5: boolean;
  private corked: Writable | null = null;
  /** stop() was called, or another gateway with our id took the client id: no more reconnecting, no more asking. */
  private ended = false;
  /** MQTT 5: the broker ended this connection with 0x8E (session taken over); the close that follows asks who. */
  private sessionTakenOver = false;
  /** Takeovers since start, for the log; while the last connection was taken over, connecting does not reset the backoff. */
  private takeovers = 0;
  private backoffHeld = false;
  /** The acknowledgement callbacks of reply publishes the broker has not acknowledged yet. */
  private readonly unacknowledgedReplies = new Set<unknown>();
  private role: GatewayRole | undefined;
  private readonly budgets: RequestBudgets;

  constructor(private readonly options: MqttLinkOptions) {
    this.role = options.role;
    this.base = options.mqtt.baseTopic;
    this.v5 = options.mqtt.protocolVersion === 5;
    this.reconnectMs = options.mqtt.reconnect.minMs;
    this.budgets = new RequestBudgets(options.budgets);
  }

  get connected(): boolean {
    return this.client?.connected ?? false;
  }

  /**
   * Gateway group: a new role. The active gateway subscribes to the request topics; a standby
   * unsubscribes (it answers no requests, and drops any already on their way). The status
   * topic says which.
   */
  setRole(role: GatewayRole): void {
    if (this.role === role) return;
    this.role = role;
    const client = this.client;
    if (!client?.connected) return; // the next connect subscribes (or not) and publishes the status
    if (role === "active") this.subscribeAndAnnounce(client);
    else {
      client.unsubscribe([...this.requestFilters()]);
      this.publishStatus(client);
    }
  }

  /** The request topics of this gateway's own actuators. */
  private requestFilters(): readonly string[] {
    return actuatorRequestSubscriptions(this.base, this.sink?.actuatorIds() ?? []);
  }

  /** What a standby still answers: who it is (`B/gateway/read`, presence.ts), so a second gateway with its id is found. */
  private get presenceTopic(): string {
    return `${this.base}/${GATEWAY_LEVEL}/read`;
  }

  /** The status, and which actuators this gateway serves (a standby too: its group does). */
  private publishStatus(client: MqttClient): void {
    const { gatewayId, identity } = this.options;
    client.publish(
      gatewayActuatorsTopic(this.base, gatewayId),
      directoryPayload(gatewayId, this.sink?.actuatorIds() ?? [], identity.group),
      { qos: 1, retain: true },
    );
    client.publish(gatewayStatusTopic(this.base, gatewayId), gatewayStatusPayload(true, this.role), { qos: 1, retain: true });
  }

  /**
   * Subscribes to the request topics (unless a standby), then says the gateway's status and
   * every actuator's state. `done` runs once the broker has the subscription (or at once for
   * a standby).
   */
  private subscribeAndAnnounce(client: MqttClient, done: () => void = () => {}): void {
    const { mqtt, log } = this.options;
    const sink = this.sink;
    if (this.role === "standby") {
      client.subscribe(this.presenceTopic, { qos: 1 }, () => {
        log.info({ broker: mqtt.url, protocolVersion: mqtt.protocolVersion, role: this.role }, "MQTT connected");
        this.publishStatus(client);
        done();
      });
      return;
    }
    // Retain As Published (v5): otherwise the broker clears the retain flag on live
    // delivery and a retained request would pass as a fresh one. MQTT 3.1.1 has no such
    // option: there a retained request is caught only when (re)subscribing.
    client.subscribe([this.presenceTopic, ...this.requestFilters()], this.v5 ? { qos: 1, rap: true } : { qos: 1 }, (err) => {
      if (err) {
        log.error({ err }, "MQTT subscribe failed; requests will not arrive");
        return;
      }
      // Only once the broker has the subscription does a request reach us: `online` (and
      // the log line operators and tests wait for) must not promise more than that.
      log.info({ broker: mqtt.url, protocolVersion: mqtt.protocolVersion, ...(this.role ? { role: this.role } : {}) }, "MQTT connected");
      this.publishStatus(client);
      for (const id of sink?.actuatorIds() ?? []) {
        const view = sink?.view(id);
        if (view) this.state(view);
      }
      for (const view of this.options.unservedStates?.() ?? []) this.state(view);
      done();
    });
  }

  /** Connects and starts taking requests for `sink`. Resolves on the first connection. */
  start(sink: RequestSink): Promise<void> {
    this.sink = sink;
    const { mqtt, gatewayId, log } = this.options;
    const statusTopic = gatewayStatusTopic(this.base, gatewayId);
    const clientOptions: IClientOptions = {
      protocolVersion: mqtt.protocolVersion,
      clientId: mqtt.clientId,
      clean: true,
      keepalive: mqtt.keepaliveS,
      reconnectPeriod: this.reconnectMs,
      // mqtt.js stops reconnecting for good after a refused CONNACK (wrong password, not
      // authorized) unless told otherwise: the gateway must keep trying, with its backoff,
      // until the broker's side is fixed.
      reconnectOnConnackError: true,
      connectTimeout: 10_000,
      resubscribe: false, // we subscribe on every connect ourselves
      // mqtt-packet otherwise builds, on the first packet written, a cache of all 65,536
      // two-byte numbers as Buffers: 6.5 MB of heap that an idle daemon keeps for good.
      // Without it, each number written allocates its two bytes.
      writeCache: false,
      queueQoSZero: false,
      // mqtt.js traces every packet through `debug`, whose calls allocate their arguments
      // even when disabled (10 % of the daemon's allocations at 16 busy actuators): none
      // unless DEBUG asks for traces.
      ...(process.env["DEBUG"] ? {} : { log: () => {} }),
      ...(this.v5 ? { properties: { sessionExpiryInterval: 0 } } : {}),
      ...(mqtt.username !== undefined ? { username: mqtt.username } : {}),
      ...(mqtt.password !== undefined ? { password: mqtt.password } : {}),
      will: { topic: statusTopic, payload: Buffer.from(gatewayStatusPayload(false)), qos: 1, retain: true },
    };
    const socket = streamBuilder(mqtt);
    const limit = maxPacketBytes(mqtt.maxPayloadBytes);
    const client = new MqttClient(() => new GuardedStream(socket(), limit, (packet, raw) => this.onOversized(packet, raw)), clientOptions);
    this.client = client;
    client.on("message", (topic, payload, packet) => this.onMessage(topic, payload, packet));
    client.on("error", (err) => log.warn({ err }, "MQTT error"));
    client.on("close", () => {
      this.dropUnacknowledgedReplies(client);
      const takenOver = this.sessionTakenOver;
      this.sessionTakenOver = false;
      // A client that keeps taking the id must not get a reconnect storm in answer: the
      // backoff grows across takeovers, and starts over after a connection that ended otherwise.
      if (!takenOver && this.backoffHeld) this.reconnectMs = mqtt.reconnect.minMs;
      this.backoffHeld = takenOver;
      client.options.reconnectPeriod = this.reconnectMs;
      this.reconnectMs = Math.min(mqtt.reconnect.maxMs, this.reconnectMs * 2);
      if (!this.ended) void this.askWhoTookTheId(client, takenOver);
    });
    client.on("offline", () =>
      log.warn({ broker: mqtt.url, retryInMs: client.options.reconnectPeriod }, "MQTT broker unreachable; reconnecting"),
    );
    // Brokers that say so (MQTT 5 reason 0x8E); Mosquitto 2.0 just closes. Either way any
    // client may have taken the id: the close asks who before anything is concluded.
    client.on("disconnect", (packet) => {
      if (packet.reasonCode === SESSION_TAKEN_OVER) this.sessionTakenOver = true;
    });
    return new Promise((resolve) => {
      client.on("connect", () => {
        if (!this.backoffHeld) this.reconnectMs = mqtt.reconnect.minMs;
        client.options.reconnectPeriod = this.reconnectMs;
        this.subscribeAndAnnounce(client, resolve);
      });
    });
  }

  /**
   * After the broker closed the connection: if another gateway with our id answers while we
   * are still disconnected, it took the client id, and reconnecting would take it back and
   * have it taken again, forever. If we are connected again by then, it is the one displaced,
   * and it asks in turn: of two, exactly one stays. A takeover nobody answers for is some
   * other broker client with our id: keep reconnecting, and say so loudly (docs/deploy.md,
   * "Client ids").
   */
  private async askWhoTookTheId(client: MqttClient, takenOver: boolean): Promise<void> {
    const other = await this.options.otherWithSameId?.();
    if (other !== undefined && !client.connected && !this.ended) return this.displaced(client, other);
    if (!takenOver || this.ended) return;
    this.takeovers++;
    const { mqtt, gatewayId, log } = this.options;
    log.error(
      { broker: mqtt.url, clientId: mqtt.clientId, takeovers: this.takeovers, retryInMs: client.options.reconnectPeriod },
      `The broker says another connection took this gateway's MQTT client id "${mqtt.clientId}" (MQTT 5 reason 0x8E, session taken over), and no other fencegate with gatewayId "${gatewayId}" answers: some other broker client uses the id. Reconnecting with backoff; make the broker bind client ids to users (docs/deploy.md, "Client ids").`,
    );
  }

  private displaced(client: MqttClient, by: GatewayIdentity): void {
    if (this.ended) return;
    this.ended = true;
    client.end(true);
    this.options.onDisplaced?.(by);
  }

  private count(map: Map<string, number>, key: string): void {
    map.set(key, (map.get(key) ?? 0) + 1);
  }

  /**
   * A packet over the limit went by unread (see packet-guard.ts). A QoS 1 PUBLISH is still
   * acknowledged, or the broker would keep its delivery slot to the gateway taken. (The
   * gateway subscribes at QoS 1, so the broker sends it nothing at QoS 2.)
   */
  private onOversized(packet: DroppedPacket, socket: Writable): void {
    if (packet.type === PUBLISH_TYPE && packet.qos === 1 && packet.packetId !== null) socket.write(pubackPacket(packet.packetId, this.v5));
    this.count(this.counters.unanswerable, "TOO_LARGE");
    this.options.log.warn(
      { cause: "TOO_LARGE", bytes: packet.bytes, type: packet.type, limitBytes: maxPacketBytes(this.options.mqtt.maxPayloadBytes) },
      "an MQTT packet over the size limit was dropped unread",
    );
  }

  private onMessage(topic: string, payload: Buffer, packet: IPublishPacket): void {
    // The PUBACK mqtt.js writes after this handler joins the turn's one write, instead of a
    // write of its own ahead of the command's way to the journal.
    if (this.client) this.coalesceWrites(this.client);
    const sink = this.sink;
    const where = parseRequestTopic(this.base, topic);
    if (!sink || !where) return;
    if (this.role === "standby" && !(where.actuator === GATEWAY_LEVEL && where.verb === "read")) {
      // On its way before the unsubscribe: the active gateway answers requests, not this one.
      this.count(this.counters.unanswerable, "standby");
      return;
    }
    this.counters.requests++;
    const lease = sink.liveLease(where.actuator);
    let holderTraffic = false;
    const admit = (holder: unknown, token: unknown) => {
      // Not served here: UNKNOWN_ACTUATOR, from the shell. But `B/gateway/read` (who this
      // gateway is) has a budget like any actuator's: a reply is owed to each.
      if (lease === undefined && where.actuator !== GATEWAY_LEVEL) return null;
      holderTraffic =
        lease !== undefined && lease !== null && holder === lease.holder && (where.verb === "lease/acquire" || token === lease.token);
      // An acquire of a free actuator competes with nobody's lease: the first one is granted,
      // and those after it find the lease held and count against their budgets.
      if (holderTraffic || (lease === null && where.verb === "lease/acquire")) return null;
      const requester = typeof holder === "string" ? holder : "_";
      const admission = this.budgets.take(where.actuator, requester, performance.now());
      if (admission === "admit") return null;
      const who = requester === "_" ? "requests without a holder" : `the requests of ${requester}`;
      return {
        drop: admission === "drop",
        message: `${where.actuator} takes only so many requests a second from anyone but its lease holder, and ${who} (or everyone's together) went over it; retry in a second.`,
      };
    };
    const parsed = parseRequest({
      base: this.base,
      actuator: where.actuator,
      verb: where.verb,
      payload,
      retain: packet.retain,
      responseTopic: packet.properties?.responseTopic,
      correlationData: packet.properties?.correlationData,
      limits: this.options.limits,
      admit,
    });
    if (parsed.kind === "unanswerable") {
      this.count(this.counters.unanswerable, parsed.cause);
      // One by one at debug, summarised by the shell: an outsider can send these at any rate.
      this.options.log.debug({ topic, cause: parsed.cause }, `request dropped without reply: ${parsed.reason}`);
      this.options.onRefused?.(where.actuator, null, parsed.cause);
      return;
    }
    if (parsed.kind === "refused") {
      this.count(this.counters.refusedAtEdge, parsed.code);
      this.options.log.debug({ actuator: where.actuator, id: parsed.id, code: parsed.code }, parsed.message);
      this.options.onRefused?.(
        where.actuator,
        parsed.route.kind === "holderTopic" ? holderOf(parsed.route.holderTopic) : null,
        parsed.code,
      );
      this.publishReply(parsed.route, refusalPayload(parsed));
      return;
    }
    const { request, route } = parsed;
    if (request.actuator === GATEWAY_LEVEL && request.verb === "read") {
      this.publishReply(route, identityReplyPayload(request.id, this.options.identity));
      return;
    }
    this.dispatch(sink, request, route, holderTraffic ? "holder" : "requests");
  }
  /** Hands a parsed request to the gateway, unless its actuator has the most of its kind in progress already. */
  private dispatch(sink: RequestSink, request: Request, route: ReplyRoute, writeKind: "holder" | "requests"): void {
    const kind: PendingKind = request.verb === "read" ? "reads" : writeKind;
    const pending = this.pending.get(request.actuator) ?? { reads: 0, requests: 0, holder: 0 };
    if (pending[kind] >= (kind === "reads" ? this.options.maxPendingReadsPerActuator : this.options.maxPendingRequestsPerActuator)) {
      const what =
        kind === "reads" ? "reads" : kind === "holder" ? "lease requests and commands of its holder" : "lease requests and commands";
      const message = `${request.actuator} has ${pending[kind]} ${what} in progress, the most it takes at once; retry shortly.`;
      this.count(this.counters.refusedAtEdge, "OVERLOADED");
      this.options.onRefused?.(request.actuator, request.holder, "OVERLOADED");
      this.publishReply(route, replyPayload(request.id, { ok: false, error: { code: "OVERLOADED", message } }));
      return;
    }
    pending[kind]++;
    this.pending.set(request.actuator, pending);
    const ref = sink.allocateRef();
    this.routes.set(ref, { id: request.id, route, actuator: request.actuator, kind });
    sink.submit(request.actuator, ref, request);
  }

  private publishReply(route: ReplyRoute, payload: string): void {
    const opts: IClientPublishOptions = { qos: 1, retain: false };
    const acknowledged: PacketCallback = () => this.unacknowledgedReplies.delete(acknowledged);
    this.unacknowledgedReplies.add(acknowledged);
    if (route.kind === "responseTopic") {
      if (route.correlationData) opts.properties = { correlationData: route.correlationData };
      if (!this.publish(route.responseTopic, payload, opts, acknowledged)) acknowledged();
    } else if (!this.publish(route.holderTopic, payload, opts, acknowledged)) {
      acknowledged();
    }
  }

  /**
   * mqtt.js keeps every unacknowledged QoS 1 publish and re-sends it first thing on the next
   * connection, clean session or not. A reply whose publish made the broker cut the
   * connection (a topic it refuses) would then cut every later connection too, before the
   * gateway could even subscribe. Replies are the one thing an outsider shapes, and a lost
   * reply is already a normal case the contract handles (a retried acquire returns the live
   * lease, a retried command is DUPLICATE with its original outcome): drop them. States and
   * events keep mqtt.js's re-send; the gateway composes them alone.
   */
  private dropUnacknowledgedReplies(client: MqttClient): void {
    let dropped = 0;
    for (const [messageId, pending] of Object.entries(client.outgoing)) {
      if (!this.unacknowledgedReplies.has(pending.cb)) continue;
      client.removeOutgoingMessage(Number(messageId)); // calls the callback: it leaves the set
      dropped++;
    }
    this.unacknowledgedReplies.clear();
    if (dropped > 0)
      this.options.log.warn(
        { dropped },
        "the MQTT connection dropped with replies unacknowledged; they are not re-sent (requesters retry)",
      );
  }

  /** Publishes only while connected (a reply owed to a dead connection is not queued up); false if not. */
  private publish(topic: string, payload: string, opts: IClientPublishOptions, acknowledged?: PacketCallback): boolean {
    const client = this.client;
    if (!client?.connected) return false;
    this.coalesceWrites(client);
    client.publish(topic, payload, opts, acknowledged);
    return true;
  }

  /**
   * Holds the socket's writes until the end of this turn of the event loop, so the reply,
   * events and states one turn publishes (five packets per command, and the PUBACKs) leave
   * in one write instead of one each: a write is a system call, and they were 10 % of the
   * daemon's CPU at 16 busy actuators. Released in the same turn (setImmediate).
   */
  private coalesceWrites(client: MqttClient): void {
    const stream = client.stream as Writable | undefined;
    if (stream === undefined || this.corked === stream) return;
    stream.cork();
    this.corked = stream;
    setImmediate(() => {
      if (this.corked === stream) this.corked = null;
      stream.uncork();
    });
  }

  reply(ref: number, reply: OutboundReply): void {
    const owed = this.routes.get(ref);
    if (!owed) return;
    this.routes.delete(ref);
    const pending = this.pending.get(owed.actuator);
    if (pending) {
      pending[owed.kind]--;
      if (pending.reads === 0 && pending.requests === 0 && pending.holder === 0) this.pending.delete(owed.actuator);
    }
    const payload = "state" in reply ? readReplyPayload(owed.id, reply.state) : replyPayload(owed.id, reply);
    this.publishReply(owed.route, payload);
  }

  event(actuator: string, event: CoreEvent & { readonly at: Date }): void {
    this.publish(eventsTopic(this.base, actuator), eventPayload(event, event.at), { qos: 1, retain: false });
  }

  state(view: StateView): void {
    this.publish(stateTopic(this.base, view.actuator), statePayload(view), { qos: 1, retain: true });
  }

  /**
   * Publishes every actuator's retained state as offline with no lease (no lease outlives
   * the process), then `offline` (the clean-shutdown twin of the last will), and
   * disconnects, never waiting on a broker that is gone: mqtt.js's graceful end waits until
   * every QoS 1 message is acknowledged, and with the broker down (end also cancels the
   * reconnect) that is forever. Then the connection is just dropped: nothing queued could be
   * delivered (clean session), and the last will says `offline` for us.
   */
  async stop(): Promise<void> {
    const client = this.client;
    this.ended = true;
    if (!client) return;
    const lastWords = () => {
      const retained = { qos: 1, retain: true } as const;
      // A group member leaves the states alone: they name the active gateway, which may be
      // another one by now; its status tells readers whether they are current.
      const states = (this.role !== undefined ? [] : (this.sink?.actuatorIds() ?? [])).flatMap((id) => {
        const view = this.sink?.view(id);
        return view
          ? [client.publishAsync(stateTopic(this.base, id), statePayload({ ...view, online: false, lease: null }), retained)]
          : [];
      });
      return Promise.all([
        ...states,
        client.publishAsync(gatewayStatusTopic(this.base, this.options.gatewayId), gatewayStatusPayload(false, this.role), retained),
      ]);
    };
    const acknowledged =
      client.connected &&
      (await within(
        STOP_GRACE_MS,
        lastWords().then(
          () => true,
          () => false,
        ),
      ));
    if (
      acknowledged &&
      (await within(
        STOP_GRACE_MS,
        client.endAsync().then(() => true),
      ))
    )
      return;
    client.stream?.destroy();
    await client.endAsync(true);
  }
}

/** The holder level of a `B/A/reply/H` topic. */
function holderOf(replyTopic: string): string {
  return replyTopic.slice(replyTopic.lastIndexOf("/") + 1);
}

/** MQTT 5 DISCONNECT reason: another connection took this client id. */
const SESSION_TAKEN_OVER = 0x8e;
/** The MQTT control packet type of PUBLISH. */
const PUBLISH_TYPE = 3;

/** How long a clean shutdown waits on the broker for each of `offline` and the disconnect. */
const STOP_GRACE_MS = 2000;

/** The promise's value, or false once `ms` have passed. */
function within(ms: number, promise: Promise<boolean>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
