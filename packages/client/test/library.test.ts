/**
 * The client library against the real daemon process, a real Mosquitto and the simulated
 * fenced actuator: what a controller author relies on.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { DEFAULT_TTL_MS, FencegateClient, FencegateError, FencegateTimeoutError, LeaseLostError, type Lease } from "../src/index.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../../test/support/daemon.ts";
import { startMosquitto, type Broker } from "../../../test/support/mosquitto.ts";
import { startTcpProxy } from "../../../test/support/proxy.ts";
import { TopicWatcher, until } from "../../../test/support/watch.ts";

let dir: string;
let broker: Broker;
let sim: SimulatorHandle;
let daemon: DaemonProcess;
const clients: FencegateClient[] = [];

async function connect(holder: string, options: { protocolVersion?: 4 | 5; requestTimeoutMs?: number } = {}): Promise<FencegateClient> {
  const client = await FencegateClient.connect({ url: broker.url, holder, ...options });
  clients.push(client);
  return client;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-client-"));
  broker = await startMosquitto();
  sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1, 2, 3], rate: 0 });
  const bus = { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 2000 };
  daemon = DaemonProcess.start(
    dir,
    gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { sim: bus },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2), valve("valve-3", "sim", 3)],
    }),
  );
  await daemon.ready(["valve-1", "valve-2", "valve-3"]);
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await daemon?.kill("SIGTERM");
  await sim?.close();
  await broker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("client library", () => {
  it("acquires without options, for the gateway's default TTL", async () => {
    const client = await connect("lib-default-ttl");
    const lease = await client.acquire("valve-3");
    expect(lease.ttlMs).toBe(DEFAULT_TTL_MS);
    await lease.release();
  });

  it("has the default TTL of the gateway's own leases.defaultTtlMs", () => {
    expect(
      parseConfig({
        gatewayId: "g",
        mqtt: { url: "mqtt://127.0.0.1" },
        buses: { s: { type: "tcp", host: "127.0.0.1" } },
        actuators: [valve("valve-1", "s", 1)],
        journal: { path: "j.db" },
      }).leases.defaultTtlMs,
    ).toBe(DEFAULT_TTL_MS);
  });

  it("acquires, commands with increasing seq, and releases", async () => {
    const client = await connect("lib-basic");
    const lease = await client.acquire("valve-1", { ttlMs: 2000 });
    const first = await lease.command({ position: 12.5 });
    const second = await lease.command({ position: 13 });
    expect(first).toEqual({ token: lease.token, seq: 0, applied: { position: 12.5 } });
    expect(second.seq).toBe(1);
    expect(sim.device(1).targetPosition).toBe(13);
    await lease.release();
    await expect(lease.command({ position: 1 })).rejects.toBeInstanceOf(LeaseLostError);
    const state = await client.read("valve-1");
    expect(state.lease).toBeNull();
  });

  it("renews by itself across several TTLs and keeps its token", async () => {
    const client = await connect("lib-renew");
    const lease = await client.acquire("valve-1", { ttlMs: 300 });
    let renewals = 0;
    lease.on("renewed", () => renewals++);
    await sleep(1200); // four TTLs
    expect(lease.lost).toBeNull();
    expect(renewals).toBeGreaterThanOrEqual(3);
    expect(await lease.command({ position: 40 })).toMatchObject({ token: lease.token });
    await lease.release();
  });

  it("tells its owner at once when another holder takes over after a pause", async () => {
    const a = await connect("lib-paused");
    const b = await connect("lib-taker");
    // renewEveryMs beyond the TTL: A behaves like a process that stopped (GC, swap).
    const leaseA = await a.acquire("valve-2", { ttlMs: 200, renewEveryMs: 60_000 });
    const lost = new Promise<Error>((resolve) => leaseA.on("lost", resolve));
    await sleep(250);
    const leaseB = await b.acquire("valve-2", { ttlMs: 5000 });
    await leaseB.command({ position: 55 });
    const reason = await lost;
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect(reason.message).toContain(`newer token (${leaseB.token})`);
    expect((reason as LeaseLostError).contractCode).toBe("STALE_TOKEN");
    await expect(leaseA.command({ position: 99 })).rejects.toBeInstanceOf(LeaseLostError);
    expect(sim.device(2).targetPosition).toBe(55);
    await leaseB.release();
  });

  it("with expireLocally, says the lease is lost the moment it expires unrenewed, not when a renewal times out", async () => {
    const client = await connect("lib-expire-locally", { requestTimeoutMs: 5000 });
    const lease = await client.acquire("valve-1", { ttlMs: 600, expireLocally: true });
    const lost = new Promise<{ reason: Error; atMs: number }>((resolve) =>
      lease.on("lost", (reason) => resolve({ reason, atMs: performance.now() })),
    );
    const frozenAtMs = performance.now();
    broker.signal("SIGSTOP"); // the broker answers nothing: the renewal sent next hangs for 5 s
    try {
      const { reason, atMs } = await lost;
      expect(reason).toMatchObject({ name: "LeaseLostError", contractCode: "LEASE_EXPIRED" });
      expect(atMs - frozenAtMs).toBeLessThan(2000);
    } finally {
      broker.signal("SIGCONT");
    }
    await expect(lease.command({ position: 1 })).rejects.toBeInstanceOf(LeaseLostError);
  });

  it("with expireLocally, counts a new lease's time from when the acquire was sent, so it is lost before the gateway expires it even when the grant is slow to arrive", async () => {
    const link = await startTcpProxy({ host: "127.0.0.1", port: broker.port });
    const events = await TopicWatcher.connect(broker.url, ["fencegate/valve-3/events"]);
    try {
      const client = await FencegateClient.connect({ url: link.url, holder: "lib-slow-grant" });
      clients.push(client);
      link.holdAfterUpstream("valve-3/lease/acquire");
      // The request is sent within the call (before its first await): its deadline lies between these two.
      const before = performance.now();
      const acquiring = client.acquire("valve-3", { ttlMs: 1500, renewEveryMs: 60_000, expireLocally: true });
      const after = performance.now();
      await events.waitForJson("fencegate/valve-3/events", (e) => e.type === "granted" && e.holder === "lib-slow-grant", {
        what: "the grant",
      });
      await sleep(400); // the grant's reply waits in the proxy: a slow link back
      link.resume();
      const lease = await acquiring;
      // The gateway's TTL runs from its decision, after `before`: by our clock the lease must end
      // no later than the gateway's end, however late the grant arrived.
      expect(lease.expiresAtMs).toBeGreaterThanOrEqual(before + 1500);
      expect(lease.expiresAtMs).toBeLessThanOrEqual(after + 1500);
      await new Promise<void>((resolve) => lease.once("lost", () => resolve()));
      expect(lease.lost?.message).toMatch(/expired before a renewal/);
    } finally {
      link.resume();
      await events.close();
      await link.close();
    }
  });

  it("marks the lease lost on a refusal that ends it, and reports fence and holder", async () => {
    const a = await connect("lib-stale");
    const b = await connect("lib-newer");
    const leaseA = await a.acquire("valve-2", { ttlMs: 150, renewEveryMs: 60_000 });
    await sleep(200);
    const leaseB = await b.acquire("valve-2", { ttlMs: 5000 });
    // Send A's command before its state watcher can notice: the gateway's refusal decides.
    const error = await a
      .request("valve-2", "command", { holder: "lib-stale", token: leaseA.token, seq: 0, set: { position: 1 } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FencegateError);
    expect(error).toMatchObject({
      code: "STALE_TOKEN",
      fence: { token: leaseB.token },
      lease: { holder: "lib-newer", token: leaseB.token },
    });
    expect((error as FencegateError).endsLease).toBe(true);
    await leaseB.release();
  });

  it.each([
    ["UNKNOWN_POINT", { flow: 1 }],
    ["READ_ONLY_POINT", { actual: 1 }],
    ["OUT_OF_RANGE", { position: 101 }],
  ])("rejects a bad point with a typed %s and keeps the lease", async (code, set) => {
    const client = await connect(`lib-${code.toLowerCase().replace(/_/g, "-")}`);
    const lease = await client.acquire("valve-3", { ttlMs: 2000 });
    await expect(lease.command(set)).rejects.toMatchObject({ name: "FencegateError", code });
    expect(lease.lost).toBeNull();
    await lease.release();
  });

  it("rejects LEASE_HELD with who holds it", async () => {
    const a = await connect("lib-holder");
    const b = await connect("lib-waiter");
    const lease = await a.acquire("valve-3", { ttlMs: 2000 });
    await expect(b.acquire("valve-3", { ttlMs: 2000 })).rejects.toMatchObject({
      code: "LEASE_HELD",
      lease: { holder: "lib-holder", token: lease.token },
    });
    await lease.release();
  });

  it("re-reads state for the caller on OUTCOME_UNKNOWN", async () => {
    const client = await connect("lib-unknown");
    const lease = await client.acquire("valve-3", { ttlMs: 5000 });
    sim.dropResponses(1, 3, 16); // the command block's answer, not a poll's
    const error = (await lease.command({ position: 33 }).catch((e: unknown) => e)) as FencegateError;
    expect(error.code).toBe("OUTCOME_UNKNOWN");
    expect(error.state).toMatchObject({ actuator: "valve-3", fence: { token: lease.token, seq: 0 } });
    expect(lease.lost).toBeNull();
    await lease.release();
  });

  it("retries a command whose reply was lost with the same (token, seq): DUPLICATE answers it, the device acts once", async () => {
    // A short client timeout and a slow device: the first reply comes after the client gave up.
    const client = await connect("lib-retry", { requestTimeoutMs: 400 });
    const lease = await client.acquire("valve-1", { ttlMs: 10_000 });
    const before = sim.device(1).applied.length;
    sim.setDelay(700, 1);
    try {
      const result = await lease.command({ position: 77 }, { retries: 3 });
      expect(result).toEqual({ token: lease.token, seq: 0, applied: { position: 77 } });
    } finally {
      sim.setDelay(0, 1);
    }
    expect(sim.device(1).applied.length - before).toBe(1);
    await lease.release();
  });

  it("gives up with a typed timeout when nothing answers", async () => {
    const client = await FencegateClient.connect({
      url: broker.url,
      holder: "lib-timeout",
      baseTopic: "nobody-serves-this",
      requestTimeoutMs: 200,
    });
    clients.push(client);
    await expect(client.read("valve-1")).rejects.toBeInstanceOf(FencegateTimeoutError);
  });

  it("watches states and events as an async iterator", async () => {
    const watcher = await connect("lib-watcher");
    const actor = await connect("lib-actor");
    const abort = new AbortController();
    const seen: string[] = [];
    const done = (async () => {
      for await (const item of watcher.watch("valve-3", { signal: abort.signal })) {
        seen.push(item.kind === "state" ? "state" : item.event.type);
        if (seen.includes("applied")) abort.abort();
      }
    })();
    await sleep(100); // the retained state arrives first
    const lease = await actor.acquire("valve-3", { ttlMs: 2000 });
    await lease.command({ position: 5 });
    await done;
    expect(seen[0]).toBe("state");
    expect(seen).toEqual(expect.arrayContaining(["granted", "accepted", "applied"]));
    await lease.release();
  });

  it("watches an actuator its own lease follows: the current state comes, and the watch's end leaves the lease following it", async () => {
    const client = await connect("lib-self-watch");
    // No renewals: the lease runs out, and only its state subscription can tell it it is fenced.
    const lease = await client.acquire("valve-2", { ttlMs: 1500, renewEveryMs: 60_000 });
    const abort = new AbortController();
    const firstState = (async () => {
      for await (const item of client.watch("valve-2", { signal: abort.signal })) {
        if (item.kind !== "state") continue;
        abort.abort();
        return item;
      }
    })();
    const first = await Promise.race([firstState, sleep(2000).then(() => "no state within 2 s")]);
    expect(first).toMatchObject({ kind: "state", state: { actuator: "valve-2", lease: { holder: "lib-self-watch", token: lease.token } } });
    const other = await connect("lib-self-watch-next");
    let next: Lease | undefined;
    while (next === undefined) next = await other.acquire("valve-2", { ttlMs: 5000 }).catch(() => sleep(100).then(() => undefined)); // LEASE_HELD until the first runs out
    await next.command({ position: 9 });
    await until(() => lease.lost, { timeoutMs: 2000, what: "the first lease to learn of the newer token" });
    expect(lease.lost?.message).toMatch(/newer token/);
    await next.release();
  });

  it("works over MQTT 3.1.1, replies on B/A/reply/<holder>", async () => {
    const client = await connect("lib-v311", { protocolVersion: 4 });
    const lease = await client.acquire("valve-1", { ttlMs: 2000 });
    expect(await lease.command({ position: 21 })).toMatchObject({ applied: { position: 21 } });
    await lease.release();
  });
});

describe("what gateways announce", () => {
  it("keeps the announcements of at most 1024 gateways: the 1024th is believed, one beyond is not", async () => {
    const client = await connect("lib-announced", { requestTimeoutMs: 1500 });
    const mqtt = await import("mqtt");
    const publisher = await mqtt.default.connectAsync(broker.url, { clientId: "lib-announcer" });
    try {
      // The daemon's own announcement came on subscribing: 1023 more reach the limit.
      for (let i = 1; i <= 1023; i++) {
        await publisher.publishAsync(
          `fencegate/gateway/gw-${i}/actuators`,
          JSON.stringify({ gateway: `gw-${i}`, actuators: i === 1023 ? ["valve-edge"] : [] }),
          { qos: 1 },
        );
      }
      await publisher.publishAsync(
        "fencegate/gateway/gw-late/actuators",
        JSON.stringify({ gateway: "gw-late", actuators: ["valve-late"] }),
        {
          qos: 1,
        },
      );
      await sleep(200);
      // Announced by the 1024th: no gateway answers, so only the timeout tells.
      await expect(client.read("valve-edge")).rejects.toBeInstanceOf(FencegateTimeoutError);
      const late = await client.read("valve-late").catch((err: unknown) => err);
      expect(late).toBeInstanceOf(FencegateError);
      expect((late as FencegateError).code).toBe("UNKNOWN_ACTUATOR");
      expect((await client.read("valve-1")).actuator).toBe("valve-1");
    } finally {
      await publisher.endAsync();
    }
  });
});
