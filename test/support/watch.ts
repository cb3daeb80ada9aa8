/**
 * Observing from the outside: an MQTT subscriber that remembers every message per topic
 * (with its retain flag) and lets a test await one, and a poll-until for in-process state
 * such as the simulator's device snapshot.
 */
import { randomUUID } from "node:crypto";
import { brokerAddress } from "fencegate-client";
import mqtt, { type MqttClient } from "mqtt";

export interface Seen {
  readonly topic: string;
  readonly payload: string;
  readonly retain: boolean;
  /** The MQTT 5 Correlation Data the message carried, if any. */
  readonly correlationData?: Buffer | undefined;
}

export class TopicWatcher {
  readonly messages: Seen[] = [];
  private readonly waiters: { pred: (m: Seen) => boolean; resolve: (m: Seen) => void }[] = [];
  private lastAtMs = 0;

  private constructor(readonly client: MqttClient) {
    client.on("message", (topic, payload, packet) => {
      const m: Seen = { topic, payload: payload.toString(), retain: packet.retain, correlationData: packet.properties?.correlationData };
      this.messages.push(m);
      this.lastAtMs = performance.now();
      for (const w of [...this.waiters]) {
        if (w.pred(m)) {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          w.resolve(m);
        }
      }
    });
  }

  /**
   * Connects (reconnecting and resubscribing by itself after a broker restart) and subscribes.
   * MQTT 5 unless `v5: false` (3.1.1). With no topics it only publishes.
   */
  static async connect(url: string, topics: readonly string[], options: { v5?: boolean } = {}): Promise<TopicWatcher> {
    const protocolVersion = options.v5 === false ? 4 : 5;
    const client = await mqtt.connectAsync({
      ...brokerAddress(url),
      protocolVersion,
      clientId: `watch-${randomUUID().slice(0, 8)}`,
      reconnectPeriod: 100,
    });
    const w = new TopicWatcher(client);
    if (topics.length > 0) await client.subscribeAsync([...topics], { qos: 1 });
    return w;
  }

  /** The index the next message will get: pass it as `from` to look only at later messages. */
  mark(): number {
    return this.messages.length;
  }

  /** Resolves once no message has arrived for `quietMs` (to show that something did NOT come). */
  async quiet(quietMs: number): Promise<void> {
    for (;;) {
      const wait = this.lastAtMs + quietMs - performance.now();
      if (wait <= 0) return;
      await new Promise((r) => setTimeout(r, wait));
    }
  }

  /** The last message seen on `topic`, if any. */
  last(topic: string): Seen | undefined {
    for (let i = this.messages.length - 1; i >= 0; i--) if (this.messages[i]!.topic === topic) return this.messages[i];
    return undefined;
  }

  /** Resolves with the first message from index `from` on (past or future) that `pred` accepts. */
  waitFor(pred: (m: Seen) => boolean, options: { from?: number; timeoutMs?: number; what?: string } = {}): Promise<Seen> {
    const seen = this.messages.slice(options.from ?? 0).find(pred);
    if (seen) return Promise.resolve(seen);
    const timeoutMs = options.timeoutMs ?? 10_000;
    return new Promise((resolve, reject) => {
      const waiter = {
        pred,
        resolve: (m: Seen) => {
          clearTimeout(timer);
          resolve(m);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        const recent = this.messages.slice(-5).map((m) => `${m.topic}: ${m.payload}`);
        reject(new Error(`no ${options.what ?? "matching message"} within ${timeoutMs} ms; last: ${JSON.stringify(recent)}`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** Like {@link waitFor} on one topic, parsing the payload as JSON for the predicate. */
  waitForJson(
    topic: string,
    pred: (body: Record<string, any>) => boolean,
    options: { from?: number; timeoutMs?: number; what?: string } = {},
  ): Promise<Record<string, any>> {
    return this.waitFor((m) => m.topic === topic && safeJson(m.payload) !== undefined && pred(safeJson(m.payload)!), {
      what: `${topic} message`,
      ...options,
    }).then((m) => safeJson(m.payload)!);
  }

  async close(): Promise<void> {
    await this.client.endAsync(true);
  }
}

export function safeJson(s: string): Record<string, any> | undefined {
  try {
    const v: unknown = JSON.parse(s);
    return typeof v === "object" && v !== null ? (v as Record<string, any>) : undefined;
  } catch {
    return undefined;
  }
}

/** Polls `check` every `everyMs` until it returns a value other than undefined/false. */
export async function until<T>(
  check: () => T | undefined | false,
  options: { timeoutMs?: number; everyMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  for (;;) {
    const v = check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${options.what ?? "a condition"}`);
    await new Promise((r) => (options.everyMs === 0 ? setImmediate(r) : setTimeout(r, options.everyMs ?? 5)));
  }
}

/**
 * Turns Nagle's algorithm off on an mqtt.js client's socket, now and after every reconnect.
 * mqtt.js does not do it by itself, and with Nagle plus the broker's delayed ACK a client
 * that sends one request at a time waits ~40 ms per round trip (field notes): a test
 * measuring throughput or fairness would be measuring that instead.
 */
export function tcpNoDelay(client: MqttClient): MqttClient {
  const set = () => (client.stream as { setNoDelay?: (on: boolean) => void } | undefined)?.setNoDelay?.(true);
  set();
  client.on("connect", set);
  return client;
}

/**
 * What a newcomer to the broker is told: the retained messages on `topics`. The broker queues
 * them when it takes the subscription, so a message the newcomer publishes to itself after
 * that arrives after them: waiting for it is exact, where waiting for a quiet spell is not
 * (on a busy machine the retained messages can take longer than the spell).
 */
export async function retainedOn(brokerUrl: string, topics: string[]): Promise<Map<string, string>> {
  const marker = `fencegate-test/${randomUUID()}`;
  const late = await TopicWatcher.connect(brokerUrl, [...topics, marker]);
  try {
    await late.client.publishAsync(marker, "after the retained messages", { qos: 1 });
    await late.waitFor((m) => m.topic === marker, { what: "the newcomer's own message" });
    return new Map(late.messages.filter((m) => m.retain && m.topic !== marker).map((m) => [m.topic, m.payload]));
  } finally {
    await late.close();
  }
}
