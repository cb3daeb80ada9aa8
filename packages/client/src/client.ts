/**
 * The controller side of the fencegate MQTT API: a typed client that does the contract's
 * bookkeeping (ids, reply routing, seq, renewal, retries with the same (token, seq)) so a
 * controller author only decides what to do with an outcome.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import mqtt, { type IClientOptions, type MqttClient } from "mqtt";
import { FencegateError, FencegateTimeoutError } from "./errors.ts";
import { DEFAULT_TTL_MS, Lease, type LeaseOptions } from "./lease.ts";
import type { ActuatorState } from "./messages.ts";
import {
  GATEWAY_STATUSES,
  HOLDER_PATTERN,
  clientReplyTopic,
  withGatewayStatus,
  type EventMessage,
  type Fence,
  type GatewayStatus,
  type RequestVerb,
  eventsTopic,
  gatewayActuatorsTopic,
  gatewayStatusTopic,
  replyTopic,
  requestTopic,
  stateTopic,
  topicMatches,
} from "../../protocol/src/index.ts";
import type { LeaseTransport, Reply } from "./transport.ts";

export interface ClientOptions {
  /** mqtt://host:1883 or mqtts://host:8883 */
  readonly url: string;
  /** This controller's holder id: `^[A-Za-z0-9._:-]{1,128}$`, stable across restarts. */
  readonly holder: string;
  /** 5 (default): replies on a private response topic; 4 (3.1.1): on B/A/reply/<holder>. */
  readonly protocolVersion?: 5 | 4;
  readonly baseTopic?: string;
  readonly username?: string;
  readonly password?: string;
  /** Files by path, or their contents (`ca`, `cert`, `key`: what Node-RED's TLS configuration node gives); contents win. */
  readonly tls?: {
    readonly caFile?: string;
    readonly certFile?: string;
    readonly keyFile?: string;
    readonly ca?: string | Buffer;
    readonly cert?: string | Buffer;
    readonly key?: string | Buffer;
    readonly passphrase?: string;
    readonly servername?: string;
    readonly rejectUnauthorized?: boolean;
  };
  /** How long to wait for any reply before FencegateTimeoutError (default 5000). */
  readonly requestTimeoutMs?: number;
  /** MQTT client id; default fencegate-client-<holder>-<random>. */
  readonly clientId?: string;
}

export type WatchItem =
  { readonly kind: "state"; readonly state: ActuatorState } | { readonly kind: "event"; readonly event: EventMessage };

/**
 * The broker URL as mqtt.js's connection options. Given the URL string, mqtt.js parses it
 * with the legacy url.parse(), deprecated with a warning on Node 24 (DEP0169); the WHATWG
 * parser here reads it the same way for mqtt:, mqtts:, ws: and wss: URLs.
 */
export function brokerAddress(url: string): IClientOptions {
  const u = new URL(url);
  const protocol = u.protocol.slice(0, -1) as NonNullable<IClientOptions["protocol"]>;
  return {
    protocol,
    hostname: u.hostname.replace(/^\[(.*)\]$/, "$1"),
    ...(u.port ? { port: Number(u.port) } : {}),
    ...(protocol.startsWith("ws") ? { path: `${u.pathname}${u.search}` } : {}),
    ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
  };
}

/**
 * The TLS options for mqtt.js: each of CA, certificate and key from its contents or its
 * file. mqtt.js hands its options to tls.connect, which takes the key's passphrase.
 */
function tlsMaterial(
  t: ClientOptions["tls"],
): Partial<Pick<IClientOptions, "ca" | "cert" | "key" | "servername" | "rejectUnauthorized">> & { passphrase?: string } {
  if (t === undefined) return {};
  const material = (contents: string | Buffer | undefined, file: string | undefined) => contents ?? (file ? readFileSync(file) : undefined);
  const [ca, cert, key] = [material(t.ca, t.caFile), material(t.cert, t.certFile), material(t.key, t.keyFile)];
  return {
    ...(ca !== undefined ? { ca } : {}),
    ...(cert !== undefined ? { cert } : {}),
    ...(key !== undefined ? { key } : {}),
    ...(t.passphrase !== undefined ? { passphrase: t.passphrase } : {}),
    ...(t.servername !== undefined ? { servername: t.servername } : {}),
    ...(t.rejectUnauthorized !== undefined ? { rejectUnauthorized: t.rejectUnauthorized } : {}),
  };
}

/** Bound on items a slow `watch` consumer may fall behind; the oldest are dropped beyond it. */
const WATCH_BUFFER_LIMIT = 1000;

/**
 * How long a request may go unanswered before the client looks whether any gateway
 * announces its actuator (retained `B/gateway/<id>/actuators`): a gateway serving it
 * answers a refusal at once and most requests well within this; a gateway that does not
 * serve it never hears it (docs/mqtt-api.md, "Several gateways on one broker").
 */
const UNKNOWN_ACTUATOR_AFTER_MS = 1000;
/** The most gateways' announcements the client keeps (any broker client may publish some). */
const MAX_ANNOUNCING_GATEWAYS = 1024;

export class FencegateClient implements LeaseTransport {
  private readonly pending = new Map<string, (reply: Reply) => void>();
  /** gatewayId → the actuator ids it announces serving. */
  private readonly announced = new Map<string, readonly string[]>();
  private readonly announcedFilter: string;
  /** Listeners per subscribed filter: the broker's subscription ends with the last of them. */
  readonly #listenersByFilter = new Map<string, number>();
  readonly base: string;
  readonly holder: string;
  private readonly v5: boolean;
  private readonly replyTopic: string;
  readonly requestTimeoutMs: number;
  /** Connections made so far (1 + reconnects): after a reconnect a request may have been delivered twice. */
  connections = 1;

  private constructor(
    readonly mqtt: MqttClient,
    options: ClientOptions,
  ) {
    this.base = options.baseTopic ?? "fencegate";
    this.holder = options.holder;
    this.v5 = (options.protocolVersion ?? 5) === 5;
    this.replyTopic = this.v5 ? clientReplyTopic(this.base, options.holder, randomUUID()) : replyTopic(this.base, "+", options.holder);
    this.requestTimeoutMs = options.requestTimeoutMs ?? 5000;
    this.announcedFilter = gatewayActuatorsTopic(this.base, "+");
    mqtt.on("message", (topic, payload, packet) => this.onMessage(topic, payload, packet.properties?.correlationData));
    mqtt.on("connect", () => this.connections++);
  }

  static async connect(options: ClientOptions): Promise<FencegateClient> {
    if (!HOLDER_PATTERN.test(options.holder)) throw new TypeError(`holder "${options.holder}" must match ${HOLDER_PATTERN.source}`);
    const t = options.tls;
    const mqttOptions: IClientOptions = {
      protocolVersion: options.protocolVersion ?? 5,
      clientId: options.clientId ?? `fencegate-client-${options.holder}-${randomUUID().slice(0, 8)}`,
      clean: true,
      reconnectPeriod: 1000,
      // mqtt.js stops reconnecting after one refused CONNACK (bad credentials, a broker
      // restarting): a controller must keep trying, as the gateway does.
      reconnectOnConnackError: true,
      connectTimeout: 10_000,
      // No cache of all 65,536 two-byte numbers as Buffers (6.5 MB of heap, kept for good).
      writeCache: false,
      ...(options.username !== undefined ? { username: options.username } : {}),
      ...(options.password !== undefined ? { password: options.password } : {}),
      ...tlsMaterial(t),
    };
    const connection = await mqtt.connectAsync({ ...brokerAddress(options.url), ...mqttOptions });
    // Round trips of ~0.2 ms instead of ~88 ms (Nagle + delayed ACK; see the field notes).
    (connection.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
    connection.on("connect", () => (connection.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true));
    const client = new FencegateClient(connection, options);
    await connection.subscribeAsync([client.replyTopic, client.announcedFilter], { qos: 1 });
    return client;
  }

  /** A gateway's retained `B/gateway/<id>/actuators`; an empty payload clears it. */
  private onAnnouncement(topic: string, payload: Buffer): void {
    const gatewayId = topic.split("/").at(-2)!;
    let actuators: unknown;
    try {
      actuators = payload.length === 0 ? undefined : (JSON.parse(payload.toString("utf8")) as { actuators?: unknown }).actuators;
    } catch {
      return;
    }
    if (!Array.isArray(actuators)) {
      this.announced.delete(gatewayId);
      return;
    }
    if (!this.announced.has(gatewayId) && this.announced.size >= MAX_ANNOUNCING_GATEWAYS) return;
    this.announced.set(
      gatewayId,
      actuators.filter((a): a is string => typeof a === "string"),
    );
  }

  /**
   * UNKNOWN_ACTUATOR if gateways announce their actuators and none lists `actuator`; null
   * when one does, or none announces anything (then only a reply or the timeout tells).
   */
  private unknownActuator(actuator: string): FencegateError | null {
    if (this.announced.size === 0) return null;
    const all = [...this.announced];
    if (all.some(([, ids]) => ids.includes(actuator))) return null;
    const listed = all.flatMap(([, ids]) => ids);
    const shown = listed.length > 12 ? `${listed.slice(0, 12).join(", ")} and ${listed.length - 12} more` : listed.join(", ") || "none";
    return new FencegateError({
      code: "UNKNOWN_ACTUATOR",
      message: `No gateway on this broker serves an actuator "${actuator}": ${all.length} gateway(s) announce theirs (${all.map(([id]) => id).join(", ")}), and they serve ${shown}.`,
    });
  }

  private onMessage(topic: string, payload: Buffer, correlation: Buffer | undefined): void {
    if (topicMatches(this.announcedFilter, topic)) return this.onAnnouncement(topic, payload);
    let body: unknown;
    try {
      body = JSON.parse(payload.toString("utf8"));
    } catch {
      return;
    }
    if (typeof body !== "object" || body === null) return;
    const key = correlation?.toString() ?? String((body as { id?: unknown }).id);
    const done = this.pending.get(key);
    if (done) {
      this.pending.delete(key);
      done(body as Reply);
    }
  }

  /**
   * Sends one request and resolves with the success reply, or rejects with
   * FencegateError (the gateway refused) or FencegateTimeoutError (no reply in time).
   * `id` lets a retry reuse the same request id.
   */
  async request(
    actuator: string,
    verb: RequestVerb,
    body: Record<string, unknown>,
    options: { id?: string; timeoutMs?: number } = {},
  ): Promise<Reply> {
    const id = options.id ?? randomUUID();
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMs;
    const reply = await new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        clearTimeout(unknownTimer);
        this.pending.delete(id);
        reject(new FencegateTimeoutError(`no reply to ${verb} on ${actuator} within ${timeoutMs} ms`));
      }, timeoutMs);
      const unknownTimer = setTimeout(
        () => {
          const unknown = this.unknownActuator(actuator);
          if (unknown === null) return;
          clearTimeout(timer);
          this.pending.delete(id);
          reject(unknown);
        },
        Math.min(UNKNOWN_ACTUATOR_AFTER_MS, timeoutMs),
      );
      this.pending.set(id, (r) => {
        clearTimeout(timer);
        clearTimeout(unknownTimer);
        resolve(r);
      });
      const properties = this.v5 ? { responseTopic: this.replyTopic, correlationData: Buffer.from(id) } : undefined;
      this.mqtt.publish(
        requestTopic(this.base, actuator, verb),
        JSON.stringify({ id, ...body }),
        { qos: 1, retain: false, ...(properties ? { properties } : {}) },
        (err) => {
          if (err) {
            clearTimeout(timer);
            clearTimeout(unknownTimer);
            this.pending.delete(id);
            reject(new FencegateTimeoutError(`could not publish ${verb}: ${err.message}`));
          }
        },
      );
    });
    if (!reply.ok) throw new FencegateError(reply.error ?? { code: "INTERNAL", message: "The reply carried no error." });
    return reply;
  }

  /** Takes a lease on `actuator` (for `options.ttlMs`, default {@link DEFAULT_TTL_MS}); it renews itself until released or lost. */
  async acquire(actuator: string, options: LeaseOptions = {}): Promise<Lease> {
    // The lease's time runs from the request, as the gateway's does from its decision: by our
    // clock it must end before it ends there, however long the grant took to arrive.
    const sentAtMs = performance.now();
    const reply = await this.request(actuator, "lease/acquire", { holder: this.holder, ttlMs: options.ttlMs ?? DEFAULT_TTL_MS });
    const granted = reply.lease as { token: number; ttlMs: number; secret?: string };
    const lease = new Lease(this, actuator, granted.token, granted.ttlMs, options, granted.secret, sentAtMs);
    // Our live lease came back (we restarted within its TTL): number above the seqs used under it.
    const fence = reply.fence as Fence | undefined;
    if (fence?.token === granted.token && fence.seq !== null) lease.skipSeqsThrough(fence.seq);
    await lease.start();
    return lease;
  }

  /** A fresh read of the device, the lease and the fence. */
  async read(actuator: string): Promise<ActuatorState> {
    const reply = await this.request(actuator, "read", { holder: this.holder });
    return reply.state as ActuatorState;
  }

  /** @internal Calls `listener` with every JSON message on `filter` (a topic, `+` allowed). */
  subscribe(filter: string, listener: (topic: string, body: unknown) => void): Promise<() => Promise<void>> {
    return this.subscribeText(filter, (topic, text) => {
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return; // not JSON: not ours to interpret
      }
      listener(topic, body);
    });
  }

  /** @internal Calls `listener` with every message on `filter` (a topic, `+` allowed), as text. */
  async subscribeText(filter: string, listener: (topic: string, text: string) => void): Promise<() => Promise<void>> {
    const levels = filter.split("/");
    const matches = (topic: string) => {
      const t = topic.split("/");
      return t.length === levels.length && levels.every((l, i) => l === "+" || l === t[i]);
    };
    const dispatch = (topic: string, payload: Buffer) => {
      if (matches(topic)) listener(topic, payload.toString("utf8"));
    };
    this.mqtt.on("message", dispatch);
    // A lease and a watch may follow one topic on this connection. The broker holds one
    // subscription for both, so it is counted, and SUBSCRIBE is sent again for each listener:
    // mqtt.js skips a filter it has already subscribed, and only a SUBSCRIBE makes the broker
    // send the retained state the new listener expects first.
    this.#listenersByFilter.set(filter, (this.#listenersByFilter.get(filter) ?? 0) + 1);
    await this.mqtt.subscribeAsync({ [filter]: { qos: 1 }, resubscribe: true } as unknown as Record<string, { qos: 1 }>);
    return async () => {
      this.mqtt.off("message", dispatch);
      const left = (this.#listenersByFilter.get(filter) ?? 1) - 1;
      if (left > 0) {
        this.#listenersByFilter.set(filter, left);
        return;
      }
      this.#listenersByFilter.delete(filter);
      await this.mqtt.unsubscribeAsync(filter).catch(() => {});
    };
  }

  /**
   * Follows every gateway's retained `B/gateway/<id>/status`; `onChange` is called with each
   * gateway whose status arrives. Use with {@link withGatewayStatus}.
   */
  async gatewayStatuses(
    onChange: (gatewayId: string) => void = () => {},
  ): Promise<{ get(gatewayId: string | undefined): GatewayStatus | undefined; anyOnline(): boolean; stop(): Promise<void> }> {
    const statuses = new Map<string, GatewayStatus>();
    const stop = await this.subscribeText(gatewayStatusTopic(this.base, "+"), (topic, text) => {
      if (!GATEWAY_STATUSES.has(text)) return;
      const gatewayId = topic.split("/").at(-2)!;
      statuses.set(gatewayId, text as GatewayStatus);
      onChange(gatewayId);
    });
    return {
      get: (gatewayId) => (gatewayId === undefined ? undefined : statuses.get(gatewayId)),
      anyOnline: () => [...statuses.values()].includes("online"),
      stop,
    };
  }

  /**
   * States (retained, so the current one comes first) and events of `actuator` as an async
   * iterator. Each state is as it stands given its gateway's status ({@link withGatewayStatus}):
   * when the gateway goes offline (stopped, or its last will), the state comes again, offline
   * with no lease. Ends when the consumer breaks out of the loop or `signal` aborts.
   */
  async *watch(actuator: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<WatchItem> {
    const buffer: WatchItem[] = [];
    let wake: (() => void) | null = null;
    const push = (item: WatchItem) => {
      buffer.push(item);
      if (buffer.length > WATCH_BUFFER_LIMIT) buffer.shift();
      wake?.();
    };
    let last: ActuatorState | null = null;
    const pushState = () => {
      if (last !== null) push({ kind: "state", state: withGatewayStatus(last, gateways.get(last.gateway)) });
    };
    const gateways = await this.gatewayStatuses((gatewayId) => {
      if (last?.gateway === gatewayId) pushState();
    });
    const unsubscribers = [
      gateways.stop,
      await this.subscribe(stateTopic(this.base, actuator), (_t, body) => {
        last = body as ActuatorState;
        pushState();
      }),
      await this.subscribe(eventsTopic(this.base, actuator), (_t, body) => push({ kind: "event", event: body as EventMessage })),
    ];
    const aborted = new Promise<void>((resolve) => options.signal?.addEventListener("abort", () => resolve(), { once: true }));
    try {
      while (!options.signal?.aborted) {
        const item = buffer.shift();
        if (item) {
          yield item;
          continue;
        }
        await Promise.race([new Promise<void>((resolve) => (wake = resolve)), aborted]);
        wake = null;
      }
    } finally {
      await Promise.all(unsubscribers.map((u) => u()));
    }
  }

  async close(): Promise<void> {
    await this.mqtt.endAsync();
  }
}
