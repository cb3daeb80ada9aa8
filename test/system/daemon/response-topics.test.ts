/**
 * Response topics chosen by a hostile or careless requester, against the real daemon, a real Mosquitto and the simulated actuators:
 * a topic the broker would refuse is refused as INVALID_REQUEST before anything is
 * published there, so the gateway stays connected and other leases keep renewing; a topic
 * of the gateway's own is refused too; and a reply whose publish got the gateway cut off is
 * not re-sent on the next connection.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FencegateClient, type Lease } from "fencegate-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator } from "../../../firmware-bridge/src/simulator.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto } from "../../support/mosquitto.ts";
import { startTcpProxy, type TcpProxy } from "../../support/proxy.ts";
import { startStack, stopDaemon, Teardown, type Stack } from "../../support/stack.ts";
import { TopicWatcher, until } from "../../support/watch.ts";

const teardown = new Teardown();
let stack: Stack;
let owner: FencegateClient;
let lease: Lease;
let watcher: TopicWatcher;

const HOSTILE_REPLIES = "fencegate/valve-1/reply/hostile";

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "response-topics",
    sim: () => ({ units: [1, 2], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", host: sim.host, port: sim.port, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2)],
      mqtt: { reconnect: { minMs: 100, maxMs: 400 } },
    }),
    fenced: ["valve-1", "valve-2"],
  });
  owner = teardown.add(await FencegateClient.connect({ url: stack.broker.url, holder: "line-a", requestTimeoutMs: 2000 }), (c) =>
    c.close(),
  );
  // A short lease renewed every 500 ms: lost within 1.5 s if the gateway stops answering.
  lease = await owner.acquire("valve-2", { ttlMs: 1500 });
  watcher = teardown.add(
    await TopicWatcher.connect(stack.broker.url, [
      HOSTILE_REPLIES,
      "fencegate/valve-2/state",
      "fencegate/valve-2/command",
      "fencegate/gateway/test/status",
    ]),
    (w) => w.close(),
  );
});

afterAll(() => teardown.run());

/** Publishes `body` to B/A/verb over MQTT 5 with `responseTopic`, as a hostile requester would. */
async function publishWithResponseTopic(
  actuator: string,
  verb: string,
  body: Record<string, unknown>,
  responseTopic: string,
): Promise<void> {
  await watcher.client.publishAsync(`fencegate/${actuator}/${verb}`, JSON.stringify(body), {
    qos: 1,
    properties: { responseTopic, correlationData: Buffer.from("c") },
  });
}

describe("hostile response topics", () => {
  it("a read whose response topic has 202 levels is refused INVALID_REQUEST on the holder topic; the gateway stays connected and leases keep renewing", async () => {
    let renewals = 0;
    lease.on("renewed", () => renewals++);
    const connectedBefore = stack.daemon.logs.filter((l) => l.msg === "MQTT connected").length;
    const from = watcher.mark();
    await publishWithResponseTopic("valve-1", "read", { id: "deep-1", holder: "hostile" }, `${"x/".repeat(201)}y`);
    const refusal = await watcher.waitForJson(HOSTILE_REPLIES, (b) => b.id === "deep-1", { from });
    expect(refusal).toEqual({
      id: "deep-1",
      ok: false,
      error: { code: "INVALID_REQUEST", message: "the response topic has 202 levels; at most 32 are allowed" },
    });
    // Two lease TTLs later: still held, renewed all along, never disconnected.
    await new Promise((r) => setTimeout(r, 3000));
    expect(lease.lost).toBeNull();
    expect(renewals).toBeGreaterThanOrEqual(4);
    expect(stack.daemon.logs.filter((l) => l.msg === "MQTT connected").length).toBe(connectedBefore);
    expect(stack.daemon.logs.some((l) => /broker unreachable/.test(l.msg ?? ""))).toBe(false);
  });

  it.each([
    ["another actuator's state topic", "fencegate/valve-2/state"],
    ["another actuator's command topic", "fencegate/valve-2/command"],
    ["the gateway status topic", "fencegate/gateway/test/status"],
  ])("a response topic naming %s is refused on the holder topic, and nothing is published there", async (_label, topic) => {
    const id = `own-${randomUUID().slice(0, 8)}`;
    const from = watcher.mark();
    await publishWithResponseTopic("valve-1", "read", { id, holder: "hostile" }, topic);
    const refusal = await watcher.waitForJson(HOSTILE_REPLIES, (b) => b.id === id, { from });
    expect(refusal.error.code).toBe("INVALID_REQUEST");
    expect(refusal.error.message).toContain("gateway's own topics");
    await watcher.quiet(300);
    expect(watcher.messages.slice(from).filter((m) => m.topic === topic && m.payload.includes(id))).toEqual([]);
  });
});

describe("a reply that gets the gateway disconnected", () => {
  const local = new Teardown();
  let proxy: TcpProxy;
  let daemon: DaemonProcess;
  let asker: TopicWatcher;

  beforeAll(async () => {
    const dir = local.add(mkdtempSync(join(tmpdir(), "fencegate-reply-cut-")), (d) => rmSync(d, { recursive: true, force: true }));
    const broker = local.add(await startMosquitto(), (b) => b.stop());
    const sim = local.add(await startSimulator({ units: [1], rate: 0, tcp: { host: "127.0.0.1", port: 0 } }), (s) => s.close());
    // The daemon reaches the broker through a proxy that plays a broker refusing one reply.
    proxy = local.add(await startTcpProxy({ host: "127.0.0.1", port: broker.port }), (p) => p.close());
    const config = gatewayConfig({
      brokerUrl: proxy.url,
      journalPath: join(dir, "journal.db"),
      buses: { sim: { type: "tcp", host: sim.tcp!.host, port: sim.tcp!.port, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "sim", 1)],
      mqtt: { reconnect: { minMs: 100, maxMs: 400 } },
    });
    daemon = local.add(DaemonProcess.start(dir, config), (d) => stopDaemon(d));
    await daemon.ready(["valve-1"]);
    asker = local.add(await TopicWatcher.connect(broker.url, []), (w) => w.close());
  });

  afterAll(() => local.run());

  it("is not re-sent on the next connection (mqtt.js would re-send it first, every time)", async () => {
    const cutTopic = `probe/${randomUUID()}`;
    const answeredTopic = `probe/${randomUUID()}`;
    await asker.client.subscribeAsync([cutTopic, answeredTopic], { qos: 1 });
    proxy.cutOnUpstream(cutTopic);
    await asker.client.publishAsync("fencegate/valve-1/read", JSON.stringify({ id: "cut-1" }), {
      qos: 1,
      properties: { responseTopic: cutTopic },
    });
    await until(() => proxy.connections.some((c) => c.cut), { what: "the proxy to cut the connection carrying the reply" });
    await daemon.waitForLog(
      (l) => l.msg === "MQTT connected" && daemon.logs.indexOf(l) > daemon.logs.findIndex((k) => k.msg === "MQTT connected"),
      10_000,
      "a second MQTT connection",
    );
    // The new connection works: a fresh read is answered over it.
    await asker.client.publishAsync("fencegate/valve-1/read", JSON.stringify({ id: "after-1" }), {
      qos: 1,
      properties: { responseTopic: answeredTopic },
    });
    const answer = await asker.waitForJson(answeredTopic, (b) => b.id === "after-1");
    expect(answer).toMatchObject({ id: "after-1", ok: true });
    const later = proxy.connections.slice(proxy.connections.findIndex((c) => c.cut) + 1);
    expect(later.length).toBeGreaterThan(0);
    expect(later.some((c) => c.upstream.includes(cutTopic))).toBe(false);
    expect(asker.messages.filter((m) => m.topic === cutTopic)).toEqual([]);
    expect(daemon.logs.some((l) => l.dropped === 1)).toBe(true);
  });
});
