/**
 * MQTT 5 DISCONNECT reason 0x8E (session taken over) says only that some connection took
 * the gateway's client id, which any broker client may do: it is no proof of a second
 * gateway. A stand-in broker (a raw MQTT 5 server, so the test decides when to send 0x8E)
 * and the real MqttLink with its real presence probe; the stand-in also answers the probe
 * as many gateways as a test likes.
 */
import net from "node:net";
import { Writable } from "node:stream";
import mqttPacket from "mqtt-packet";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { MqttLink, type RequestSink } from "../../../src/adapters/mqtt/link.ts";
import type { GatewayIdentity } from "../../../packages/protocol/src/index.ts";
import { identityReplyPayload } from "../../../src/adapters/mqtt/payloads.ts";
import { duplicateOf, probeGateways } from "../../../src/adapters/mqtt/presence.ts";
import type { MqttConfig } from "../../../src/config/schema.ts";

interface Connection {
  readonly clientId: string;
  readonly socket: net.Socket;
  readonly connectedAtMs: number;
  subscribed: boolean;
}

/** Just enough of an MQTT 5 broker: CONNACK, SUBACK, PUBACK, PINGRESP; no routing. */
class StandInBroker {
  readonly connections: Connection[] = [];
  /** Answers `B/gateway/read` as these gateways would. */
  answerAs: GatewayIdentity[] = [];
  private readonly server = net.createServer((socket) => this.serve(socket));
  private waiters: (() => void)[] = [];

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return (this.server.address() as net.AddressInfo).port;
  }

  private serve(socket: net.Socket): void {
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    const send = (packet: object) => socket.write(mqttPacket.generate(packet as mqttPacket.Packet, { protocolVersion: 5 }));
    let connection: Connection | null = null;
    parser.on("packet", (packet: mqttPacket.Packet) => {
      switch (packet.cmd) {
        case "connect":
          connection = { clientId: packet.clientId, socket, connectedAtMs: performance.now(), subscribed: false };
          this.connections.push(connection);
          send({ cmd: "connack", sessionPresent: false, reasonCode: 0 });
          break;
        case "subscribe":
          send({ cmd: "suback", messageId: packet.messageId, granted: packet.subscriptions.map(() => 1) });
          if (connection) connection.subscribed = true;
          break;
        case "unsubscribe":
          send({ cmd: "unsuback", messageId: packet.messageId, granted: packet.unsubscriptions.map(() => 0) });
          break;
        case "publish": {
          const responseTopic = packet.properties?.responseTopic;
          if (packet.topic.endsWith("/gateway/read") && responseTopic !== undefined) {
            const { id } = JSON.parse(packet.payload.toString()) as { id: string };
            const properties = packet.properties?.correlationData ? { correlationData: packet.properties.correlationData } : {};
            for (const g of this.answerAs)
              send({
                cmd: "publish",
                topic: responseTopic,
                payload: identityReplyPayload(id, g),
                qos: 0,
                retain: false,
                dup: false,
                properties,
              });
          }
          if (packet.qos === 1) send({ cmd: "puback", messageId: packet.messageId, reasonCode: 0 });
          break;
        }
        case "pingreq":
          send({ cmd: "pingresp" });
          break;
        case "disconnect":
          socket.end();
          break;
      }
      for (const wake of this.waiters.splice(0)) wake();
    });
    socket.on("data", (chunk) => parser.parse(chunk));
    socket.on("error", () => {});
  }

  /** Waits until a connection with `clientId`, after the first `after` of them, has subscribed. */
  async subscribedConnection(clientId: string, after: number, timeoutMs = 10_000): Promise<Connection> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const found = this.connections.filter((c) => c.clientId === clientId)[after];
      if (found?.subscribed) return found;
      if (performance.now() > deadline)
        throw new Error(`no connection number ${after + 1} of ${clientId} subscribed within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  /** What a broker does to the older connection when a newer one takes its client id. */
  takeOver(connection: Connection): void {
    connection.socket.write(mqttPacket.generate({ cmd: "disconnect", reasonCode: 0x8e } as mqttPacket.Packet, { protocolVersion: 5 }));
    connection.socket.end();
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const identity: GatewayIdentity = { id: "gw", instance: "0123456789abcdef", host: "here", pid: process.pid };
const sink: RequestSink = {
  allocateRef: () => 0,
  submit: () => {},
  actuatorIds: () => [],
  view: () => undefined,
  liveLease: () => undefined,
};

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

async function gatewayOn(broker: StandInBroker) {
  const port = await broker.listen();
  cleanup.push(() => broker.close());
  const mqtt = {
    url: `mqtt://127.0.0.1:${port}`,
    clientId: "fencegate-gw",
    protocolVersion: 5,
    baseTopic: "fencegate",
    allowCleartextCredentials: false,
    keepaliveS: 30,
    reconnect: { minMs: 100, maxMs: 800 },
    maxPayloadBytes: 16_384,
  } as MqttConfig;
  const lines: Record<string, unknown>[] = [];
  const log = pino(
    { level: "debug" },
    new Writable({
      write(chunk, _enc, done) {
        lines.push(JSON.parse(chunk.toString()));
        done();
      },
    }),
  );
  const displaced: GatewayIdentity[] = [];
  const link = new MqttLink({
    mqtt,
    gatewayId: "gw",
    identity,
    otherWithSameId: async () => duplicateOf(await probeGateways(mqtt), identity),
    onDisplaced: (by) => displaced.push(by),
    limits: { maxPayloadBytes: 16_384, minTtlMs: 100, maxTtlMs: 60_000, maxDeadlineMs: 10_000, defaultDeadlineMs: 5000 },
    budgets: { perRequesterPerS: 50, perRequesterBurst: 100, perActuatorPerS: 500, perActuatorBurst: 1000 },
    log,
    maxPendingReadsPerActuator: 4,
    maxPendingRequestsPerActuator: 4,
  });
  cleanup.push(() => link.stop());
  await link.start(sink);
  return { link, lines, displaced };
}

function loudLines(lines: Record<string, unknown>[]) {
  return lines.filter((l) => l["level"] === 50 && /session taken over/.test(String(l["msg"])));
}

async function until(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`not so within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("MQTT 5 session taken over (DISCONNECT 0x8E)", () => {
  it("by a client that is no fencegate: the gateway asks first, keeps reconnecting with a growing backoff, and says so at error level", async () => {
    const broker = new StandInBroker();
    const { lines, displaced } = await gatewayOn(broker);
    const delaysMs: number[] = [];
    let current = await broker.subscribedConnection("fencegate-gw", 0);
    for (let n = 1; n <= 4; n++) {
      const probesBefore = broker.connections.filter((c) => c.clientId.startsWith("fencegate-gw-probe-")).length;
      const takenAtMs = performance.now();
      broker.takeOver(current);
      current = await broker.subscribedConnection("fencegate-gw", n);
      delaysMs.push(current.connectedAtMs - takenAtMs);
      // Said once it asked whether another fencegate with its id took the id (none did).
      await until(() => loudLines(lines).length >= n);
      expect(broker.connections.filter((c) => c.clientId.startsWith("fencegate-gw-probe-")).length).toBeGreaterThan(probesBefore);
    }
    expect(displaced).toEqual([]);
    // 100, 200, 400, 800 ms: a client that keeps taking the id is not answered with a reconnect storm.
    expect(delaysMs[3]!).toBeGreaterThanOrEqual(700);
    expect(delaysMs[3]!).toBeGreaterThan(delaysMs[0]! * 3);
    const loud = loudLines(lines);
    expect(loud.map((l) => l["takeovers"])).toEqual([1, 2, 3, 4]);
    expect(loud[0]).toMatchObject({ clientId: "fencegate-gw", takeovers: 1 });
    expect(String(loud[0]!["msg"])).toMatch(/no other fencegate with gatewayId "gw" answers/);
  });

  it("by another fencegate with the same gatewayId, found by the probe: the gateway stops, naming it", async () => {
    const broker = new StandInBroker();
    const { displaced } = await gatewayOn(broker);
    const other: GatewayIdentity = { id: "gw", instance: "fedcba9876543210", host: "elsewhere", pid: 4242 };
    broker.answerAs = [other];
    broker.takeOver(await broker.subscribedConnection("fencegate-gw", 0));
    await until(() => displaced.length > 0);
    expect(displaced).toEqual([other]);
  });

  it("the probe keeps at most 1024 answers, however many come", async () => {
    const broker = new StandInBroker();
    const port = await broker.listen();
    cleanup.push(() => broker.close());
    broker.answerAs = Array.from({ length: 1100 }, (_, i) => ({ id: `gw-${i}`, instance: "0123456789abcdef", host: "h", pid: i }));
    const mqtt = {
      url: `mqtt://127.0.0.1:${port}`,
      clientId: "fencegate-gw",
      protocolVersion: 5,
      baseTopic: "fencegate",
      reconnect: { minMs: 100, maxMs: 800 },
    } as MqttConfig;
    const result = await probeGateways(mqtt);
    expect(result.kind).toBe("answered");
    expect(result.kind === "answered" && result.gateways.length).toBe(1024);
  });
});
