/**
 * The real daemon, real Mosquitto, and a misbehaving Modbus slave (Modbus TCP on loopback,
 * Modbus RTU on a socat pty): what controllers, the retained state, `fencegate read`, the
 * log, /metrics and /healthz say when a device misbehaves. Each scenario starts its own slave and daemon.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { startDaemon } from "../../../src/daemon/index.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { DaemonProcess, gatewayConfig, valvePoints } from "../../support/daemon.ts";
import {
  MisbehavingSlave,
  byteCountField,
  dataBytes,
  exception,
  f32Words,
  fencedIdentity,
  truncate,
} from "../../support/misbehaving-slave.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { freePort } from "../../support/ports.ts";
import { runFencegate } from "../../support/processes.ts";
import { Teardown, daemonReport, stopDaemon } from "../../support/stack.ts";
import { TopicWatcher, safeJson, until } from "../../support/watch.ts";

const BUS_TIMEOUT_MS = 300;
const POLL_MS = 200;
const A = "valve-1";
const STATE = `fencegate/${A}/state`;
const EVENTS = `fencegate/${A}/events`;

let broker: Broker;
let pty: PtyPair;
const suite = new Teardown();
let teardown = new Teardown();
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  broker = suite.add(await startMosquitto(), (b) => b.stop());
  pty = suite.add(await createPtyPair(), (p) => p.close());
});
afterAll(() => suite.run());
afterEach(async (ctx) => {
  if (ctx.task.result?.state === "fail") console.error(daemonReport(daemon));
  await teardown.run();
  teardown = new Teardown();
  daemon = undefined;
  // The next scenario's daemon starts from no retained state, not from this one's.
  const w = await TopicWatcher.connect(broker.url, []);
  await w.client.publishAsync(STATE, "", { qos: 1, retain: true });
  await w.close();
});

/** A plain device: position (writable) at 0, actual at 1. */
const PLAIN = {
  position: { register: 0, scale: 0.01, min: 0, max: 100, writable: true },
  actual: { register: 1, scale: 0.01, min: 0, max: 100 },
};

interface Started {
  readonly slave: MisbehavingSlave;
  readonly daemon: DaemonProcess;
  readonly watcher: TopicWatcher;
  readonly c: TestController;
  readonly metricsPort: number;
  readonly dir: string;
}

async function start(options: {
  readonly transport?: "tcp" | "rtu";
  readonly profile?: "fenced" | "plain";
  readonly points?: Record<string, unknown>;
  readonly actuator?: Record<string, unknown>;
  /** Registers to set before the daemon starts. */
  readonly registers?: Record<number, number[]>;
  /** Wait until the daemon read the device's fence (a fenced device that identifies right). */
  readonly fenceRead?: boolean;
  readonly edit?: (config: Record<string, any>) => void;
}): Promise<Started> {
  const profile = options.profile ?? "plain";
  const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-misbehaving-")), (d) => rmSync(d, { recursive: true, force: true }));
  const slave = teardown.add(options.transport === "rtu" ? await MisbehavingSlave.rtu(pty.device) : await MisbehavingSlave.tcp(), (s) =>
    s.close(),
  );
  for (const [at, words] of Object.entries(options.registers ?? {})) slave.set(Number(at), words);
  const bus =
    options.transport === "rtu"
      ? { type: "rtu", path: pty.master, baudRate: 115_200, timeoutMs: BUS_TIMEOUT_MS, reconnect: { minMs: 50, maxMs: 200 } }
      : { type: "tcp", host: "127.0.0.1", port: slave.address!.port, timeoutMs: BUS_TIMEOUT_MS, reconnect: { minMs: 50, maxMs: 200 } };
  const configFor = (metricsPort: number) => {
    const config = gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { dev: bus },
      actuators: [
        {
          id: A,
          bus: "dev",
          unit: 1,
          profile,
          pollIntervalMs: POLL_MS,
          points: options.points ?? (profile === "fenced" ? valvePoints("fenced") : PLAIN),
          ...options.actuator,
        },
      ],
      metricsPort,
    });
    options.edit?.(config);
    return config;
  };
  const watcher = teardown.add(await TopicWatcher.connect(broker.url, [STATE, EVENTS]), (w) => w.close());
  const started = await DaemonProcess.startOnFreeMetricsPort(dir, configFor);
  const metricsPort = started.metricsPort;
  daemon = teardown.add(started.daemon, (d) => stopDaemon(d));
  await daemon.ready(options.fenceRead ? [A] : []);
  const c = teardown.add(await TestController.connect(broker.url, "ctl-a"), (x) => x.close());
  return { slave, daemon, watcher, c, metricsPort, dir };
}

async function metric(port: number, line: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const found = text.split("\n").find((l) => l.startsWith(line));
  return found === undefined ? undefined : Number(found.split(" ").at(-1));
}

async function healthz(port: number): Promise<{ status: number; body: Json }> {
  const res = await fetch(`http://127.0.0.1:${port}/healthz`);
  return { status: res.status, body: (await res.json()) as Json };
}

async function fencegateRead(): Promise<string> {
  const read = await runFencegate(["read", A, "--broker", broker.url], { timeoutMs: 30_000 });
  expect(read.code, read.stderr).toBe(0);
  return read.stdout;
}

async function lease(c: TestController, ttlMs = 60_000): Promise<number> {
  const r = await c.acquire(A, ttlMs);
  expect(r, JSON.stringify(r)).toMatchObject({ ok: true });
  return r.lease.token as number;
}

describe("item 1: exceptions that leave the effect uncertain", () => {
  it("a write the device applied and then answered exception 0x0B (gateway target failed to respond) is OUTCOME_UNKNOWN, event outcome-unknown", async () => {
    const { slave, watcher, c } = await start({});
    const token = await lease(c);
    const from = watcher.mark();
    slave.fault({ fc: 16, apply: true, spoil: exception(0x0b) });
    const reply = await c.command(A, token, 0, { position: 42.5 });
    expect(reply).toMatchObject({
      ok: false,
      error: { code: "OUTCOME_UNKNOWN", modbusCode: 11, fence: { token, seq: 0 }, message: expect.stringMatching(/0x0B/) },
    });
    const event = await watcher.waitForJson(EVENTS, (e) => e.seq === 0 && e.type !== "accepted", { from });
    expect(event).toMatchObject({ type: "outcome-unknown", code: "OUTCOME_UNKNOWN" });
    expect(slave.get(0)).toEqual([4250]); // the device did act
  });
});

describe("item 2: one truncated Modbus TCP answer", () => {
  it("is OUTCOME_UNKNOWN; the actuator is back within a poll interval, and the safe write on expiry goes out", async () => {
    const { slave, watcher, c } = await start({ actuator: { expiry: { policy: "safe", set: { position: 0 } } } });
    const token = await lease(c, 2000);
    slave.fault({ fc: 16, spoil: truncate(9) }); // 9 of the 12 bytes of the FC16 answer
    expect(await c.command(A, token, 0, { position: 42.5 })).toMatchObject({ ok: false, error: { code: "OUTCOME_UNKNOWN" } });
    const from = watcher.mark();
    const answeredAt = performance.now();
    // The timeout's silence (150 ms), then the next poll: a state with the device's value.
    await watcher.waitForJson(STATE, (s) => s.online === true && s.points.position === 42.5, {
      from,
      timeoutMs: 5000,
      what: "a fresh state",
    });
    expect(performance.now() - answeredAt).toBeLessThan(BUS_TIMEOUT_MS / 2 + 2 * POLL_MS + 1000); // + 1 s for a loaded machine
    expect(await c.command(A, token, 1, { position: 10 })).toMatchObject({ ok: true, applied: { position: 10 } });
    // The lease runs out: the gateway's own safe write reaches the device.
    await watcher.waitForJson(EVENTS, (e) => e.type === "applied" && e.holder === "@gateway", {
      from,
      timeoutMs: 8000,
      what: "the safe write applied",
    });
    expect(slave.get(0)).toEqual([0]);
  });
});

describe("item 3: a device that answers every read with a malformed frame", () => {
  it("Modbus TCP, fenced (its keep-alives still answered): offline with the reason; `fencegate read` and the metric agree; back when it answers right", async () => {
    const { slave, watcher, metricsPort } = await start({ profile: "fenced", registers: { 0: fencedIdentity(1) }, fenceRead: true });
    await watcher.waitForJson(STATE, (s) => s.online === true, { what: "online" });
    const from = watcher.mark();
    slave.fault({ fc: 3, times: -1, spoil: byteCountField(2) });
    const offline = await watcher.waitForJson(STATE, (s) => s.online === false, { from, timeoutMs: 5000, what: "offline" });
    expect(offline.problem).toMatch(/byte count 2 where 6 bytes were asked for/);
    const read = await fencegateRead();
    expect(read).toMatch(/^valve-1: OFFLINE$/m);
    expect(read).toMatch(/^ {2}why {4}.*byte count 2/m);
    expect(await metric(metricsPort, `fencegate_actuator_online{actuator="${A}"}`)).toBe(0);
    expect(await metric(metricsPort, `fencegate_modbus_transaction_seconds_count{bus="dev",result="malformed"}`)).toBeGreaterThanOrEqual(2);
    // From here: a state published online before the fault (the fence read's) may arrive after `from`.
    const whileOffline = watcher.mark();
    slave.clearFaults();
    const back = await watcher.waitForJson(STATE, (s) => s.online === true, { from: whileOffline, timeoutMs: 5000, what: "online again" });
    expect(back).not.toHaveProperty("problem");
    expect(await metric(metricsPort, `fencegate_actuator_online{actuator="${A}"}`)).toBe(1);
  });

  it("Modbus RTU, plain: offline with the reason, what the line carried instead of the answer", async () => {
    const { slave, watcher, metricsPort } = await start({ transport: "rtu" });
    await watcher.waitForJson(STATE, (s) => s.online === true, { what: "online" });
    const from = watcher.mark();
    // A short answer with a valid CRC (over RTU it might be a late answer: skipped, then a timeout).
    slave.fault({ fc: 3, times: -1, spoil: dataBytes(2) });
    const offline = await watcher.waitForJson(STATE, (s) => s.online === false, { from, timeoutMs: 5000, what: "offline" });
    expect(offline.problem).toMatch(/no answer within 300 ms; the line carried byte count 2 where 4 bytes were asked for instead/);
    expect(await fencegateRead()).toMatch(/^valve-1: OFFLINE\n {2}why {4}.*byte count 2/m);
    expect(await metric(metricsPort, `fencegate_actuator_online{actuator="${A}"}`)).toBe(0);
    const whileOffline = watcher.mark();
    slave.clearFaults();
    await watcher.waitForJson(STATE, (s) => s.online === true, { from: whileOffline, timeoutMs: 5000, what: "online again" });
  });
});

describe("item 6: a fenced actuator pointed at a device without the fenced identity block", () => {
  it("gets nothing written and no lease; the state, the log and the refusal say why; it is taken up once it identifies right", async () => {
    const { slave, watcher, c, daemon } = await start({ profile: "fenced" });
    const logged = await daemon.waitForLog((l) => l.msg === "device mismatch: not the device configured", 10_000, "the mismatch");
    expect(logged).toMatchObject({
      actuator: A,
      level: 50,
      problem: expect.stringMatching(/register 0 reads 0x0000, not the fencegate magic 0x4647/),
    });
    const state = await watcher.waitForJson(STATE, (s) => s.problem !== undefined, { what: "a state with the problem" });
    expect(state).toMatchObject({ online: false, problem: expect.stringMatching(/not the fenced device configured/) });
    const refused = await c.acquire(A, 10_000);
    expect(refused).toMatchObject({
      ok: false,
      error: { code: "DEVICE_UNAVAILABLE", message: expect.stringMatching(/0x4647.*no lease is granted/) },
    });
    await new Promise((r) => setTimeout(r, 3 * POLL_MS));
    expect(slave.requests.filter((r) => r.fc !== 3)).toEqual([]); // no keep-alive, no command block
    // The right device is connected: the next poll finds it, reads its fence, and leases are granted.
    slave.set(0, fencedIdentity(1));
    await daemon.waitForLog((l) => l.msg === "device fence read" && l.actuator === A, 5000, "the fence read");
    await watcher.waitForJson(STATE, (s) => s.online === true && s.problem === undefined, { timeoutMs: 5000, what: "online" });
    const token = await lease(c);
    expect(await c.command(A, token, 0, { position: 12 })).toMatchObject({ ok: true, applied: { position: 12 } });
  });
});

describe("item 7: a reading that is not a number", () => {
  it("is a point fault in the state, `fencegate read` and the metric, never a null point", async () => {
    const { watcher, metricsPort, daemon } = await start({
      points: { ...PLAIN, flow: { register: 2, type: "f32", min: 0, max: 50 } },
      registers: { 0: [1000], 2: f32Words(Number.NaN) },
    });
    const seen = await watcher.waitFor((m) => m.topic === STATE && safeJson(m.payload)?.pointFaults !== undefined, {
      what: "a state with a point fault",
    });
    expect(seen.payload).not.toMatch(/"flow":null/);
    expect(JSON.parse(seen.payload)).toMatchObject({
      online: true,
      points: { position: 10, actual: 0 },
      pointFaults: { flow: "reads NaN, not a finite number" },
    });
    expect(JSON.parse(seen.payload).points).not.toHaveProperty("flow");
    expect(await fencegateRead()).toMatch(/^ {2}faults flow reads NaN, not a finite number$/m);
    expect(await metric(metricsPort, `fencegate_point_faults{actuator="${A}"}`)).toBe(1);
    expect(daemon.logs.find((l) => l.msg === "point fault: the reading is not a finite number")).toMatchObject({
      actuator: A,
      point: "flow",
      value: "NaN",
    });
  });
});

describe("item 8: /healthz", () => {
  it("200 while a bus is open; 503 with the reason while none is; 200 again", async () => {
    const { slave, metricsPort } = await start({});
    expect(await healthz(metricsPort)).toMatchObject({ status: 200, body: { ok: true, problem: null, buses: { dev: true } } });
    const port = slave.address!.port;
    await slave.close(); // the device's TCP endpoint is gone: the bus cannot reopen
    const down = await until(
      async () => {
        const h = await healthz(metricsPort);
        return h.status === 503 ? h : undefined;
      },
      { timeoutMs: 5000, what: "503" },
    );
    expect(down!.body).toMatchObject({
      ok: false,
      problem: "no bus is open (dev): no device can be reached",
      buses: { dev: false },
      actuators: { [A]: false },
    });
    teardown.add(await MisbehavingSlave.tcp({ port }), (s) => s.close());
    await until(async () => (await healthz(metricsPort)).status === 200, { timeoutMs: 5000, what: "200 again" });
  });

  it("503 with the reason once the journal cannot commit", async () => {
    const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-healthz-")), (d) => rmSync(d, { recursive: true, force: true }));
    const journalPath = join(dir, "journal.db");
    openSqliteJournal({ path: journalPath, recentLimit: 8 }).close();
    const db = new Database(journalPath);
    db.exec("CREATE TRIGGER refuse BEFORE INSERT ON commands BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
    db.close();
    const slave = teardown.add(await MisbehavingSlave.tcp(), (s) => s.close());
    const metricsPort = await freePort();
    const config = parseConfig(
      gatewayConfig({
        brokerUrl: broker.url,
        journalPath,
        buses: { dev: { type: "tcp", host: "127.0.0.1", port: slave.address!.port, timeoutMs: BUS_TIMEOUT_MS } },
        actuators: [{ id: A, bus: "dev", unit: 1, profile: "plain", pollIntervalMs: POLL_MS, points: PLAIN }],
        metricsPort,
      }),
    );
    const inProcess = await startDaemon(config, pino({ level: "silent" }));
    teardown.add(inProcess, (d) => d.stop());
    const c = teardown.add(await TestController.connect(broker.url, "ctl-a"), (x) => x.close());
    await until(async () => (await healthz(metricsPort)).status === 200, { timeoutMs: 10_000, what: "healthy" });
    const token = await lease(c);
    void c.command(A, token, 0, { position: 1 }).catch(() => undefined); // its intent's commit fails
    expect(await inProcess.fatal).toBe(74);
    expect(await healthz(metricsPort)).toMatchObject({ status: 503, body: { ok: false, problem: "the journal failed" } });
  });
});

describe("item 9: the metrics listener beyond loopback", () => {
  it("is refused without metrics.allowNonLoopback (exit 78, naming the setting)", async () => {
    const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-metrics-")), (d) => rmSync(d, { recursive: true, force: true }));
    const config = gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { dev: { type: "tcp", host: "127.0.0.1", port: 1 } },
      actuators: [{ id: A, bus: "dev", unit: 1, profile: "plain", points: PLAIN }],
    });
    config.metrics = { enabled: true, host: "0.0.0.0", port: await freePort() };
    daemon = teardown.add(DaemonProcess.start(dir, config), (d) => stopDaemon(d));
    expect(await daemon.exited).toEqual({ code: 78, signal: null });
    expect(daemon.stderr).toMatch(/metrics\.host.*without authentication.*allowNonLoopback/s);
  });

  it("with metrics.allowNonLoopback: true it listens there, and the log warns", async () => {
    // The status page needs credentials beyond loopback: off here, as the premise is "no authentication".
    const { daemon, metricsPort: port } = await start({
      edit: (c) => (c.metrics = { ...c.metrics, host: "0.0.0.0", allowNonLoopback: true, statusPage: { enabled: false } }),
    });
    expect(daemon.logs.find((l) => l.msg?.startsWith("metrics.host is not loopback"))).toMatchObject({ level: 40, host: "0.0.0.0", port });
    expect((await healthz(port)).status).toBe(200);
  });
});
