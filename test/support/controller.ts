/**
 * A bare MQTT controller for tests: sends requests exactly as a third-party controller
 * would (JSON on the contract's topics) and waits for the reply, over MQTT 5 with a
 * response topic and correlation data, or over 3.1.1 on B/A/reply/H.
 */
import { randomUUID } from "node:crypto";
import { brokerAddress } from "fencegate-client";
import mqtt, { type MqttClient } from "mqtt";
import { tcpNoDelay } from "./watch.ts";

export type Json = Record<string, any>;

export class TestController {
  private readonly waiting = new Map<string, (reply: Json) => void>();
  private seq = 0;
  readonly replyTopic: string;

  private constructor(
    readonly client: MqttClient,
    readonly base: string,
    readonly holder: string,
    readonly v5: boolean,
  ) {
    this.replyTopic = `test/replies/${randomUUID()}`;
  }

  static async connect(url: string, holder: string, options: { base?: string; v5?: boolean } = {}): Promise<TestController> {
    const v5 = options.v5 ?? true;
    // Nagle off, as a real controller should: otherwise each request waits ~40-88 ms.
    const client = tcpNoDelay(
      await mqtt.connectAsync({
        ...brokerAddress(url),
        protocolVersion: v5 ? 5 : 4,
        clientId: `test-${holder}-${randomUUID().slice(0, 8)}`,
        reconnectPeriod: 200,
      }),
    );
    const c = new TestController(client, options.base ?? "fencegate", holder, v5);
    client.on("message", (topic, payload, packet) => c.onMessage(topic, payload, packet.properties?.correlationData));
    await client.subscribeAsync(v5 ? c.replyTopic : `${c.base}/+/reply/${holder}`, { qos: 1 });
    return c;
  }

  private onMessage(topic: string, payload: Buffer, correlation: Buffer | undefined): void {
    let body: Json;
    try {
      body = JSON.parse(payload.toString());
    } catch {
      return;
    }
    const key = correlation ? correlation.toString() : String(body.id);
    const done = this.waiting.get(key);
    if (done) {
      this.waiting.delete(key);
      done(body);
    }
  }

  nextId(): string {
    return `${this.holder}-${++this.seq}`;
  }

  /** Publishes `body` (an `id` is added if missing) to B/A/verb and resolves with the reply. */
  request(actuator: string, verb: string, body: Json, options: { retain?: boolean; timeoutMs?: number } = {}): Promise<Json> {
    const full = { id: this.nextId(), ...body };
    const key = String(full.id);
    const timeoutMs = options.timeoutMs ?? 5000;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        reject(new Error(`no reply to ${verb} ${JSON.stringify(full)} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(key, (reply) => {
        clearTimeout(timer);
        resolve(reply);
      });
      const properties = this.v5 ? { responseTopic: this.replyTopic, correlationData: Buffer.from(key) } : undefined;
      this.client.publish(`${this.base}/${actuator}/${verb}`, JSON.stringify(full), {
        qos: 1,
        retain: options.retain ?? false,
        ...(properties ? { properties } : {}),
      });
    });
  }

  /** Publishes raw bytes and waits for whatever reply carries `id` (if any) for `waitMs`. */
  async raw(
    topic: string,
    payload: Buffer | string,
    options: { retain?: boolean; id?: string; waitMs?: number } = {},
  ): Promise<Json | null> {
    const key = options.id ?? randomUUID();
    const reply = new Promise<Json | null>((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        resolve(null);
      }, options.waitMs ?? 1000);
      this.waiting.set(key, (r) => {
        clearTimeout(timer);
        resolve(r);
      });
    });
    const properties = this.v5 ? { responseTopic: this.replyTopic, correlationData: Buffer.from(key) } : undefined;
    this.client.publish(topic, payload, { qos: 1, retain: options.retain ?? false, ...(properties ? { properties } : {}) });
    return reply;
  }

  acquire(actuator: string, ttlMs: number): Promise<Json> {
    return this.request(actuator, "lease/acquire", { holder: this.holder, ttlMs });
  }

  command(actuator: string, token: number, seq: number, set: Record<string, number>, extra: Json = {}): Promise<Json> {
    return this.request(actuator, "command", { holder: this.holder, token, seq, set, ...extra });
  }

  read(actuator: string): Promise<Json> {
    return this.request(actuator, "read", {});
  }

  async close(): Promise<void> {
    await this.client.endAsync(true);
  }
}
