/**
 * npm run bench: the whole gateway, for real, against the floors of the same machine.
 *
 * Everything is a real process or a real device path: Mosquitto (started here, with
 * set_tcp_nodelay), the daemon as its own process (node bin/fencegate.mjs daemon, log level
 * info, metrics on, as in production), the simulated actuator on a socat pty (Modbus RTU) or
 * on TCP, controllers written with fencegate-client. The daemon, the broker and the latency
 * workload's simulated actuator run in their own processes; the controllers and the other
 * workloads' simulators (64 TCP devices, the 8-unit line) run in this one.
 *
 * Floors, measured in the same run, on the same broker, disk and pty:
 *   mqtt    one MQTT v5 request/response through the broker to a bare echo responder (noDelay, QoS 1)
 *   journal one durable SQLite journal commit of one record (openSqliteJournal)
 *   modbus  one FC16 command block (7 registers) to the same simulated device, modbus-serial direct
 * A command's floor is mqtt + modbus: it never waits for the disk (its intent and
 * outcome are an asynchronous audit record). An acquire's floor is mqtt + journal: its grant
 * is durable before the reply.
 *
 * Workloads: latency, scale (scale-out), bus (shared RS-485 line), contention, footprint.
 * The latency workload (commands and acquires) runs on this machine's disk and again with
 * every journal fdatasync made slower by each of --slow-sync-ms (default 5 and 20 ms, an SD
 * card; bench/slow-disk.mjs); scale-out runs on this disk and with the smallest of them.
 *
 * Targets (judged in the table at the end, PASS or MISS, each against its floor):
 *   command p50 ≤ 1.3 × (mqtt + modbus p50s); p99 ≤ 3 × (mqtt + modbus p99s)
 *   with fdatasync +5 and +20 ms: command p50 ≤ 1.1 × the undelayed p50 of the same run;
 *     acquire p50 ≥ the delay (grants stay durable)
 *   scale-out ≥ 0.7 × linear at 4 and 16 actuators, on this disk and with fdatasync +5 ms
 *   the gateway's own CPU per command (all threads, user + system, /proc) at 16 busy actuators ≤ 0.15 ms
 *   shared bus ≥ 90 % of the line limit; contention refusals cost no device transaction
 *   footprint: idle ≤ 80 MB, ≤ 120 MB with 64 actuators under load, start ≤ 1.5 s, on this
 *     Node and on each --node given (e.g. Node 24)
 *
 *   npm run bench                        # everything, 5 repeats
 *   npm run bench -- --only latency,bus  # a subset
 *   npm run bench -- --quick             # fewer repeats and shorter runs
 *   npm run bench -- --profile           # also --cpu-prof the daemon (latency, scale 16) and summarise
 *   npm run bench -- --slow-sync-ms 10   # the slow-disk runs with 10 ms per fdatasync (0: none)
 *   npm run bench -- --node /path/to/node24/bin/node   # footprint on that Node too
 *   npm run bench -- --only scale --scale 1,16 --profile   # where the CPU of 16 busy actuators goes
 *
 * Another Node runs the build (dist/) from a directory of its own, tmp/bench-node-abi<N>/:
 * a copy of node_modules whose better-sqlite3 is rebuilt for that Node's ABI (once; it
 * takes a minute or two), beside copies of bin/, dist/ and package.json. The shared
 * node_modules is never rebuilt.
 *
 * Results: a table on stdout, JSON in bench/results/gateway-<time>.json.
 */
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { SourceMap } from "node:module";
import { parseArgs } from "node:util";
import { brokerAddress, FencegateClient, FencegateError, LeaseLostError, type Lease } from "fencegate-client";
import mqtt from "mqtt";
import M from "modbus-serial";
import { openSqliteJournal } from "../src/adapters/journal/sqlite.ts";
import { DIST_MAIN, distIsFresh } from "../bin/dist.mjs";
import { FENCED, decodeFence, encodeCommandBlock } from "../packages/protocol/src/modbus-profile.ts";
import { createPtyPair, type PtyPair } from "../firmware-bridge/src/pty.ts";
import { transactionLimitMs } from "../packages/protocol/src/rtu.ts";
import { startSimulator, type SimulatorHandle } from "../firmware-bridge/src/simulator.ts";
import { DaemonProcess, gatewayConfig, valve } from "../test/support/daemon.ts";
import { FENCEGATE_BIN } from "../test/support/processes.ts";
import { startMosquitto, type Broker } from "../test/support/mosquitto.ts";
import { freePort } from "../test/support/ports.ts";
import { startSimProcess } from "../test/support/sim-process.ts";
import { Teardown, stopDaemon } from "../test/support/stack.ts";
import { tcpNoDelay } from "../test/support/watch.ts";

const ModbusRTU = M.default;
const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

export const WORKLOADS = ["latency", "scale", "bus", "contention", "footprint"] as const;
export type Workload = (typeof WORKLOADS)[number];

export interface BenchOptions {
  readonly only: readonly Workload[];
  readonly quick: boolean;
  /** Repeats of each measurement (medians across them are reported). */
  readonly repeats: number;
  /** Measured commands per latency repeat (after a warm-up). */
  readonly latencyCommands: number;
  /** Samples per floor per repeat. */
  readonly floorSamples: number;
  /** Measuring window of the throughput workloads, ms. */
  readonly windowMs: number;
  readonly scaleCounts: readonly number[];
  /**
   * Every journal fdatasync this much slower (an SD card): the latency workload runs again
   * at each, the scale-out workload at the smallest. Empty: only on this machine's disk.
   */
  readonly slowSyncMs: readonly number[];
  /** Other Node binaries the footprint is measured on too (the build, dist/). */
  readonly nodes: readonly string[];
  readonly profile: boolean;
  /** Print the table (and progress) on stdout. */
  readonly print: boolean;
  /** Write bench/results/gateway-<time>.json. */
  readonly write: boolean;
  /** npm run build first when dist/ is missing or stale, and run every daemon from dist/. */
  readonly build: boolean;
}

export function defaultOptions(quick: boolean): BenchOptions {
  return {
    only: [...WORKLOADS],
    quick,
    repeats: quick ? 2 : 5,
    latencyCommands: quick ? 500 : 3000,
    floorSamples: quick ? 500 : 2000,
    windowMs: quick ? 2000 : 5000,
    scaleCounts: [1, 4, 16, 64],
    slowSyncMs: [5, 20],
    nodes: [],
    profile: false,
    print: true,
    write: true,
    build: true,
  };
}

// ---------------------------------------------------------------------------------------
// Figures

export interface Dist {
  readonly n: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly mean: number;
  readonly max: number;
}

export function dist(samples: readonly number[]): Dist {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
  const total = s.reduce((a, b) => a + b, 0);
  return { n: s.length, p50: at(0.5), p99: at(0.99), p999: at(0.999), mean: total / s.length, max: s[s.length - 1] ?? Number.NaN };
}

/** Median and spread of one figure across repeats. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  /** (max - min) / median: how noisy the repeats were. */
  readonly spread: number;
  readonly values: readonly number[];
}

export function spread(values: readonly number[]): Spread {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  const min = s[0] ?? Number.NaN;
  const max = s[s.length - 1] ?? Number.NaN;
  return { median: mid, min, max, spread: (max - min) / mid, values };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The daemon's resident set (VmRSS) in MB, from /proc. */
function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

/** CPU time (user + system) a process has used so far, ms. */
function cpuMs(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14, 15 of stat)
  return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
}

// ---------------------------------------------------------------------------------------
// The world: broker, temp dir, daemons

/** A measuring window on the monotonic clock (µs, as V8's profiles count), and the commands answered in it. */
export interface MeasuredWindow {
  readonly startUs: number;
  readonly endUs: number;
  readonly commands: number;
}

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

interface World {
  readonly teardown: Teardown;
  readonly dir: string;
  readonly broker: Broker;
  readonly profileDir: string | null;
  /** Per profiled daemon (by profile name), the measuring window: its summary counts only the samples inside it. */
  readonly measured: Map<string, MeasuredWindow>;
  readonly log: (line: string) => void;
  /** What every daemon runs (FENCEGATE_RUNTIME), footprint's comparison aside. */
  readonly runtime: "dist" | "tsx";
}

interface Gateway {
  readonly daemon: DaemonProcess;
  readonly pid: number;
  readonly startedAtMs: number;
  stop(): Promise<void>;
}

const SLOW_DISK = pathToFileURL(path.join(repo, "bench/slow-disk.mjs")).href;

/** Which Node runs the daemon, from which bin/fencegate.mjs: this one's unless another Node's footprint is measured. */
interface Launch {
  /** Node's version, e.g. v24.11.1. */
  readonly label: string;
  readonly node: string;
  readonly bin: string;
}

async function startGateway(
  world: World,
  setup: {
    buses: Record<string, unknown>;
    actuators: { id: string }[];
    profileName?: string;
    leases?: Record<string, unknown>;
    slowSyncMs?: number;
    launch?: Launch;
  },
): Promise<Gateway> {
  const dir = fs.mkdtempSync(path.join(world.dir, "gw-"));
  const config = {
    ...gatewayConfig({
      brokerUrl: world.broker.url,
      journalPath: path.join(dir, "journal.db"),
      buses: setup.buses,
      actuators: setup.actuators,
      metricsPort: await freePort(),
      ...(setup.leases ? { leases: setup.leases } : {}),
    }),
    logging: { level: "info" }, // the production default, not the tests' debug
  };
  // One directory per profile: every thread (tsx's loader runs in a worker) writes its own file.
  const nodeArgs =
    world.profileDir && setup.profileName ? ["--cpu-prof", `--cpu-prof-dir=${path.join(world.profileDir, setup.profileName)}`] : [];
  if (setup.slowSyncMs) nodeArgs.push("--import", `${SLOW_DISK}?syncMs=${setup.slowSyncMs}`);
  const startedAtMs = performance.now();
  const daemon = DaemonProcess.start(dir, config, {
    nodeArgs,
    ...(setup.launch ? { node: setup.launch.node, bin: setup.launch.bin } : {}),
  });
  try {
    await daemon.ready(
      setup.actuators.map((a) => a.id),
      60_000,
    );
  } catch (err) {
    await daemon.kill("SIGKILL");
    throw err;
  }
  daemon.stopCollecting();
  return {
    daemon,
    pid: daemon.child.pid!,
    startedAtMs,
    stop: async () => {
      await stopDaemon(daemon, 10_000);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function connectClient(world: World, holder: string): Promise<FencegateClient> {
  return FencegateClient.connect({ url: world.broker.url, holder, requestTimeoutMs: 10_000 });
}

// ---------------------------------------------------------------------------------------
// Floors

/** Runs `once` 100 times to warm up, then `n` times, one after another; each one's ms. */
async function timeEach(n: number, once: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 100; i++) await once();
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await once();
    out.push(performance.now() - t0);
  }
  return out;
}

async function floorMqtt(world: World, n: number): Promise<number[]> {
  const id = randomUUID().slice(0, 8);
  const responder = tcpNoDelay(
    await mqtt.connectAsync({ ...brokerAddress(world.broker.url), protocolVersion: 5, clientId: `bench-echo-${id}`, reconnectPeriod: 0 }),
  );
  const requester = tcpNoDelay(
    await mqtt.connectAsync({ ...brokerAddress(world.broker.url), protocolVersion: 5, clientId: `bench-req-${id}`, reconnectPeriod: 0 }),
  );
  const requestTopic = `bench/${id}/echo`;
  const replyTopic = `bench/${id}/reply`;
  responder.on("message", (_topic, payload, packet) => {
    const responseTopic = packet.properties?.responseTopic;
    if (!responseTopic) return;
    responder.publish(responseTopic, payload, { qos: 1, properties: { correlationData: packet.properties!.correlationData! } });
  });
  await responder.subscribeAsync(requestTopic, { qos: 1 });
  await requester.subscribeAsync(replyTopic, { qos: 1 });
  let waiting: (() => void) | null = null;
  requester.on("message", () => waiting?.());
  // A payload the size of a command request.
  const body = JSON.stringify({ id: randomUUID(), holder: "bench-ctl", token: 123, seq: 4567, set: { position: 42.5 } });
  const once = () =>
    new Promise<void>((resolve) => {
      waiting = resolve;
      requester.publish(requestTopic, body, {
        qos: 1,
        properties: { responseTopic: replyTopic, correlationData: Buffer.from(randomUUID()) },
      });
    });
  const out = await timeEach(n, once);
  await Promise.all([responder.endAsync(true), requester.endAsync(true)]);
  return out;
}

function floorJournal(world: World, n: number): number[] {
  const dir = fs.mkdtempSync(path.join(world.dir, "floor-journal-"));
  const journal = openSqliteJournal({ path: path.join(dir, "journal.db"), recentLimit: 32 });
  journal.load();
  journal.commit([{ actuator: "valve-1", record: { type: "granted", holder: "bench-ctl", token: 1 } }]);
  let seq = 0;
  const next = (i: number) =>
    i % 2 === 0
      ? { actuator: "valve-1", record: { type: "intent" as const, holder: "bench-ctl", token: 1, seq, set: { position: seq % 100 } } }
      : {
          actuator: "valve-1",
          record: {
            type: "outcome" as const,
            token: 1,
            seq: seq++,
            outcome: { kind: "applied" as const, applied: { position: (seq - 1) % 100 } },
          },
        };
  for (let i = 0; i < 100; i++) journal.commit([next(i)]);
  const out: number[] = [];
  for (let i = 100; i < 100 + n; i++) {
    const entry = next(i);
    const t0 = performance.now();
    journal.commit([entry]);
    out.push(performance.now() - t0);
  }
  journal.close();
  fs.rmSync(dir, { recursive: true, force: true });
  return out;
}

/** FC16 of the 7-register command block, modbus-serial master straight on the pty, to unit 1. */
async function floorModbus(pty: PtyPair, n: number): Promise<number[]> {
  const client = new ModbusRTU();
  await client.connectRTUBuffered(pty.master, { baudRate: 115200, parity: "even", stopBits: 1, dataBits: 8 });
  client.setID(1);
  client.setTimeout(1000);
  // Above whatever the daemon granted before: the device's own fence, read as the daemon reads it.
  const token = decodeFence((await client.readHoldingRegisters(FENCED.FENCE_START, FENCED.FENCE_COUNT)).data).token + 1;
  let seq = 0;
  const once = () =>
    client.writeRegisters(FENCED.COMMAND_START, encodeCommandBlock({ token, seq: seq++, setpoints: { position: seq % 100 } }));
  const out = await timeEach(n, once);
  await new Promise<void>((r) => client.close(() => r()));
  return out;
}

/**
 * The line's own ceiling on this machine: modbus-serial straight on the pty, FC16 command
 * blocks to every unit in turn, as fast as answers come back. Commands per second.
 */
async function floorBusLine(pty: PtyPair, sim: SimulatorHandle, units: readonly number[], windowMs: number): Promise<number> {
  const client = new ModbusRTU();
  await client.connectRTUBuffered(pty.master, { baudRate: BUS_BAUD, parity: "even", stopBits: 1, dataBits: 8 });
  client.setTimeout(1000);
  const fences = new Map(units.map((u) => [u, { token: sim.device(u).fence.token + 1, seq: 0 }]));
  const once = async (unit: number) => {
    const f = fences.get(unit)!;
    client.setID(unit);
    await client.writeRegisters(
      FENCED.COMMAND_START,
      encodeCommandBlock({ token: f.token, seq: f.seq++, setpoints: { position: f.seq % 100 } }),
    );
  };
  for (const u of units) await once(u);
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < windowMs) await once(units[n++ % units.length]!);
  const perSecond = (n / (performance.now() - t0)) * 1000;
  await new Promise<void>((r) => client.close(() => r()));
  return perSecond;
}

// ---------------------------------------------------------------------------------------
// Workload: latency (one controller, one actuator on a pty, sequential commands)

export interface LatencyRepeat {
  readonly floors: { readonly mqtt: Dist; readonly journal: Dist; readonly modbus: Dist };
  readonly endToEnd: Dist;
  /** A command's floors: MQTT round trip + Modbus transaction (its audit record is not on its path). */
  readonly floorSumP50: number;
  readonly floorSumP99: number;
  readonly ratioP50: number;
  readonly ratioP99: number;
  /** Acquires (each followed by its release, untimed), one after another. */
  readonly acquire: Dist;
  /** An acquire's floor: MQTT round trip + journal commit + the emulated delay (its grant is durable before the reply). */
  readonly acquireFloorP50: number;
  readonly daemonCpuMsPerCommand: number;
  readonly commandsPerSecond: number;
}

export interface LatencyResult {
  /** Every journal fdatasync this much slower (0: this machine's disk). */
  readonly slowSyncMs: number;
  readonly repeats: readonly LatencyRepeat[];
  readonly pollIntervalMs: number;
  readonly floors: {
    readonly mqttP50: Spread;
    readonly mqttP99: Spread;
    readonly journalP50: Spread;
    readonly journalP99: Spread;
    readonly modbusP50: Spread;
    readonly modbusP99: Spread;
  };
  readonly p50: Spread;
  readonly p99: Spread;
  readonly p999: Spread;
  readonly ratioP50: Spread;
  readonly ratioP99: Spread;
  readonly acquireP50: Spread;
  readonly acquireP99: Spread;
  readonly acquireRatioP50: Spread;
  readonly daemonCpuMsPerCommand: Spread;
  readonly pooled: Dist;
}

const LATENCY_POLL_MS = 1000; // the product default

async function latency(world: World, o: BenchOptions, slowSyncMs = 0): Promise<LatencyResult> {
  const pty = world.teardown.add(await createPtyPair({ dir: fs.mkdtempSync(path.join(world.dir, "pty-")) }), (p) => p.close());
  // Its own process, as the actuator is its own device: in this one it would answer between
  // the controller's state and event messages (~0.1 ms more per transaction, measured).
  const sim = await startSimProcess(FENCEGATE_BIN, ["--serial", pty.device, "--rate", "0"]);
  world.teardown.add(sim, async (s) => {
    s.child.kill("SIGTERM");
    await s.exited;
  });
  const disk = slowSyncMs ? ` (fdatasync +${slowSyncMs} ms)` : "";
  const acquires = Math.max(20, Math.round(o.latencyCommands / 30));
  const repeats: LatencyRepeat[] = [];
  const all: number[] = [];
  for (let r = 0; r < o.repeats; r++) {
    const floors = {
      mqtt: dist(await floorMqtt(world, o.floorSamples)),
      journal: dist(floorJournal(world, o.floorSamples)),
      modbus: dist(await floorModbus(pty, o.floorSamples)),
    };
    const gw = await startGateway(world, {
      buses: { line: { type: "rtu", path: pty.master, baudRate: 115200, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "line", 1, "fenced", { pollIntervalMs: LATENCY_POLL_MS })],
      slowSyncMs,
      ...(r === 0 && slowSyncMs === 0 ? { profileName: "latency" } : {}),
    });
    const client = await connectClient(world, `bench-lat-${r}`);
    const grants: number[] = [];
    for (let i = 0; i < acquires + 5; i++) {
      const s = performance.now();
      const reply = await client.request("valve-1", "lease/acquire", { holder: client.holder, ttlMs: 30_000 });
      if (i >= 5) grants.push(performance.now() - s); // the first few warm up
      await client.request("valve-1", "lease/release", { holder: client.holder, token: (reply.lease as { token: number }).token });
    }
    const lease = await client.acquire("valve-1", { ttlMs: 30_000 });
    for (let i = 0; i < Math.min(300, o.latencyCommands); i++) await lease.command({ position: i % 100 });
    const samples: number[] = [];
    const cpu0 = cpuMs(gw.pid);
    const startUs = monotonicUs();
    const t0 = performance.now();
    for (let i = 0; i < o.latencyCommands; i++) {
      const s = performance.now();
      await lease.command({ position: (i * 7) % 100 });
      samples.push(performance.now() - s);
    }
    const elapsedMs = performance.now() - t0;
    if (r === 0 && slowSyncMs === 0) world.measured.set("latency", { startUs, endUs: monotonicUs(), commands: o.latencyCommands });
    const cpu = cpuMs(gw.pid) - cpu0;
    await lease.release();
    await client.close();
    await gw.stop();
    const e2e = dist(samples);
    const acquire = dist(grants);
    all.push(...samples);
    const floorSumP50 = floors.mqtt.p50 + floors.modbus.p50;
    const floorSumP99 = floors.mqtt.p99 + floors.modbus.p99;
    const acquireFloorP50 = floors.mqtt.p50 + floors.journal.p50 + slowSyncMs;
    repeats.push({
      floors,
      endToEnd: e2e,
      floorSumP50,
      floorSumP99,
      ratioP50: e2e.p50 / floorSumP50,
      ratioP99: e2e.p99 / floorSumP99,
      acquire,
      acquireFloorP50,
      daemonCpuMsPerCommand: cpu / o.latencyCommands,
      commandsPerSecond: (o.latencyCommands / elapsedMs) * 1000,
    });
    world.log(
      `  latency${disk} repeat ${r + 1}/${o.repeats}: command p50 ${e2e.p50.toFixed(3)} ms (×${(e2e.p50 / floorSumP50).toFixed(2)} floors), p99 ${e2e.p99.toFixed(3)} ms (×${(e2e.p99 / floorSumP99).toFixed(2)}); acquire p50 ${acquire.p50.toFixed(3)} ms`,
    );
  }
  const f = (pick: (r: LatencyRepeat) => number) => spread(repeats.map(pick));
  return {
    slowSyncMs,
    repeats,
    pollIntervalMs: LATENCY_POLL_MS,
    floors: {
      mqttP50: f((r) => r.floors.mqtt.p50),
      mqttP99: f((r) => r.floors.mqtt.p99),
      journalP50: f((r) => r.floors.journal.p50),
      journalP99: f((r) => r.floors.journal.p99),
      modbusP50: f((r) => r.floors.modbus.p50),
      modbusP99: f((r) => r.floors.modbus.p99),
    },
    p50: f((r) => r.endToEnd.p50),
    p99: f((r) => r.endToEnd.p99),
    p999: f((r) => r.endToEnd.p999),
    ratioP50: f((r) => r.ratioP50),
    ratioP99: f((r) => r.ratioP99),
    acquireP50: f((r) => r.acquire.p50),
    acquireP99: f((r) => r.acquire.p99),
    acquireRatioP50: f((r) => r.acquire.p50 / r.acquireFloorP50),
    daemonCpuMsPerCommand: f((r) => r.daemonCpuMsPerCommand),
    pooled: dist(all),
  };
}

// ---------------------------------------------------------------------------------------
// Closed-loop load: one controller per actuator, each sending its next command on the reply

interface LoadResult {
  readonly commands: number;
  readonly elapsedMs: number;
  readonly perSecond: number;
  readonly latency: Dist;
  readonly daemonCpuPercent: number;
  /** The daemon's CPU time (all its threads, user + system) per command answered in the window, ms. */
  readonly daemonCpuMsPerCommand: number;
  /** The daemon's read and write system calls (sockets, pty, journal) per command: what its CPU figure does not show under a loaded machine. */
  readonly daemonSyscallsPerCommand: { readonly reads: number; readonly writes: number };
  /** This process (controllers and simulators), % of one core. */
  readonly benchCpuPercent: number;
  /** The whole machine, % of all cores busy (other users' work included), and stolen by the hypervisor. */
  readonly machineBusyPercent: number;
  readonly machineStealPercent: number;
  readonly rssMaxMb: number;
  readonly window: MeasuredWindow;
}

/** System calls a process has made so far that read (syscr) and write (syscw), from /proc/<pid>/io. */
function syscalls(pid: number): { reads: number; writes: number } {
  const io = fs.readFileSync(`/proc/${pid}/io`, "utf8");
  return { reads: Number(/syscr: (\d+)/.exec(io)?.[1]), writes: Number(/syscw: (\d+)/.exec(io)?.[1]) };
}

/** Machine-wide CPU counters from /proc/stat: busy and steal jiffies, and the total. */
function machineCpu(): { busy: number; steal: number; total: number } {
  const line = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!;
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number) as number[];
  const busy = user! + nice! + system! + irq! + softirq!;
  return { busy, steal: steal!, total: busy + idle! + iowait! + steal! };
}

async function closedLoop(gw: Gateway, leases: readonly Lease[], windowMs: number, warmupMs: number): Promise<LoadResult> {
  let measuring = false;
  let stop = false;
  const samples: number[] = [];
  const loops = leases.map(async (lease, k) => {
    for (let i = 0; !stop; i++) {
      const s = performance.now();
      await lease.command({ position: (i * 7 + k) % 100 });
      if (measuring && !stop) samples.push(performance.now() - s);
    }
  });
  await sleep(warmupMs);
  measuring = true;
  const cpu0 = cpuMs(gw.pid);
  const sys0 = syscalls(gw.pid);
  const self0 = process.cpuUsage();
  const machine0 = machineCpu();
  const startUs = monotonicUs();
  const t0 = performance.now();
  let rssMaxMb = rssMb(gw.pid);
  while (performance.now() - t0 < windowMs) {
    await sleep(Math.min(250, windowMs - (performance.now() - t0)));
    rssMaxMb = Math.max(rssMaxMb, rssMb(gw.pid));
  }
  const elapsedMs = performance.now() - t0;
  const endUs = monotonicUs();
  const cpu = cpuMs(gw.pid) - cpu0;
  const sys1 = syscalls(gw.pid);
  const self = process.cpuUsage(self0);
  const machine1 = machineCpu();
  stop = true;
  const commands = samples.length;
  await Promise.all(loops);
  const jiffies = machine1.total - machine0.total;
  return {
    commands,
    elapsedMs,
    perSecond: (commands / elapsedMs) * 1000,
    latency: dist(samples),
    daemonCpuPercent: (cpu / elapsedMs) * 100,
    daemonCpuMsPerCommand: cpu / Math.max(1, commands),
    daemonSyscallsPerCommand: {
      reads: (sys1.reads - sys0.reads) / Math.max(1, commands),
      writes: (sys1.writes - sys0.writes) / Math.max(1, commands),
    },
    benchCpuPercent: ((self.user + self.system) / 1000 / elapsedMs) * 100,
    machineBusyPercent: ((machine1.busy - machine0.busy) / jiffies) * 100,
    machineStealPercent: ((machine1.steal - machine0.steal) / jiffies) * 100,
    rssMaxMb,
    window: { startUs, endUs, commands },
  };
}

async function acquireAll(
  world: World,
  tag: string,
  actuators: readonly string[],
): Promise<{ clients: FencegateClient[]; leases: Lease[] }> {
  const clients = await Promise.all(actuators.map((a) => connectClient(world, `bench-${tag}-${a}`)));
  const leases = await Promise.all(clients.map((c, i) => c.acquire(actuators[i]!, { ttlMs: 30_000 })));
  return { clients, leases };
}

async function releaseAll(clients: readonly FencegateClient[], leases: readonly Lease[]): Promise<void> {
  await Promise.all(leases.map((l) => l.release().catch(() => {})));
  await Promise.all(clients.map((c) => c.close()));
}

async function tcpSims(world: World, n: number): Promise<SimulatorHandle[]> {
  const sims: SimulatorHandle[] = [];
  for (let i = 0; i < n; i++)
    sims.push(world.teardown.add(await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, rate: 0 }), (s) => s.close()));
  return sims;
}

function tcpSetup(sims: readonly SimulatorHandle[], pollIntervalMs: number) {
  const buses: Record<string, unknown> = {};
  const actuators: { id: string }[] = [];
  sims.forEach((s, i) => {
    buses[`b${i}`] = { type: "tcp", host: s.tcp!.host, port: s.tcp!.port, timeoutMs: 1000 };
    actuators.push(valve(`valve-${i}`, `b${i}`, 1, "fenced", { pollIntervalMs }));
  });
  return { buses, actuators };
}

// ---------------------------------------------------------------------------------------
// Workload: scale-out (N actuators on N TCP links, one controller each, all at once)

export interface ScalePoint {
  readonly actuators: number;
  readonly perSecond: Spread;
  readonly p99: Spread;
  readonly p50: Spread;
  readonly daemonCpuPercent: Spread;
  readonly daemonCpuMsPerCommand: Spread;
  readonly daemonReadsPerCommand: Spread;
  readonly daemonWritesPerCommand: Spread;
  readonly benchCpuPercent: Spread;
  readonly machineBusyPercent: Spread;
  readonly rssMaxMb: Spread;
  /** perSecond / (actuators × perSecond at 1 actuator). */
  readonly growthVsLinear: number;
}

async function scale(world: World, o: BenchOptions, slowSyncMs = 0): Promise<ScalePoint[]> {
  const sims = await tcpSims(world, Math.max(...o.scaleCounts));
  const disk = slowSyncMs ? `fdatasync +${slowSyncMs} ms ` : "";
  const points: ScalePoint[] = [];
  const repeats = Math.max(1, Math.min(o.repeats, 3));
  for (const n of o.scaleCounts) {
    const runs: LoadResult[] = [];
    for (let r = 0; r < repeats; r++) {
      const profileName = slowSyncMs ? "scale-16-slow-disk" : "scale-16";
      const gw = await startGateway(world, {
        ...tcpSetup(sims.slice(0, n), LATENCY_POLL_MS),
        slowSyncMs,
        ...(r === 0 && n === 16 ? { profileName } : {}),
      });
      const { clients, leases } = await acquireAll(
        world,
        `scale${n}-${r}`,
        sims.slice(0, n).map((_, i) => `valve-${i}`),
      );
      const run = await closedLoop(gw, leases, o.windowMs, 500);
      runs.push(run);
      if (r === 0 && n === 16) world.measured.set(profileName, run.window);
      await releaseAll(clients, leases);
      await gw.stop();
    }
    const perSecond = spread(runs.map((x) => x.perSecond));
    const base = points[0]?.perSecond.median ?? perSecond.median;
    const baseN = points[0]?.actuators ?? n;
    const point: ScalePoint = {
      actuators: n,
      perSecond,
      p99: spread(runs.map((x) => x.latency.p99)),
      p50: spread(runs.map((x) => x.latency.p50)),
      daemonCpuPercent: spread(runs.map((x) => x.daemonCpuPercent)),
      daemonCpuMsPerCommand: spread(runs.map((x) => x.daemonCpuMsPerCommand)),
      daemonReadsPerCommand: spread(runs.map((x) => x.daemonSyscallsPerCommand.reads)),
      daemonWritesPerCommand: spread(runs.map((x) => x.daemonSyscallsPerCommand.writes)),
      benchCpuPercent: spread(runs.map((x) => x.benchCpuPercent)),
      machineBusyPercent: spread(runs.map((x) => x.machineBusyPercent)),
      rssMaxMb: spread(runs.map((x) => x.rssMaxMb)),
      growthVsLinear: perSecond.median / ((base / baseN) * n),
    };
    points.push(point);
    world.log(
      `  scale ${disk}${n}: ${perSecond.median.toFixed(0)} commands/s (×${point.growthVsLinear.toFixed(2)} of linear), p99 ${point.p99.median.toFixed(2)} ms, CPU % of a core: daemon ${point.daemonCpuPercent.median.toFixed(0)} (${point.daemonCpuMsPerCommand.median.toFixed(3)} ms, ${point.daemonReadsPerCommand.median.toFixed(1)} reads + ${point.daemonWritesPerCommand.median.toFixed(1)} writes per command), bench ${point.benchCpuPercent.median.toFixed(0)}; machine ${point.machineBusyPercent.median.toFixed(0)} % busy`,
    );
  }
  return points;
}

// ---------------------------------------------------------------------------------------
// Workload: shared bus (8 units on one emulated 115200-baud RS-485 line)

export interface BusResult {
  readonly units: number;
  readonly baud: number;
  readonly pollIntervalMs: number;
  readonly commandLimitPerSecond: number;
  readonly perSecond: Spread;
  readonly fractionOfLimit: Spread;
  /** Line time used by every transaction (commands, polls, keep-alives) / wall time. */
  readonly lineOccupancy: Spread;
  /** Polls, keep-alives and fence reads per second on the line. */
  readonly otherTransactionsPerSecond: Spread;
  readonly p99: Spread;
  /** Without the gateway: modbus-serial straight on the line, every unit in turn (the ceiling here). */
  readonly directPerSecond: Spread;
  /** The gateway's commands/s over the direct master's. */
  readonly fractionOfDirect: Spread;
  /** Commands beside polls that take half the line. */
  readonly besidePolls: BusBesidePolls;
}

/**
 * One controller's sequential commands to one unit, on the same line: alone (the floor:
 * polls every BUS_POLL_MS), and beside polls of every unit configured to take half the line
 * by frame sizes. Target: p99 beside polls ≤ the floor's p99 + one transaction at the baud
 * (the poll a command may find on the wire; it never waits behind a queue of them).
 */
export interface BusBesidePolls {
  readonly pollIntervalMs: number;
  /** The longest poll transaction at the line's baud (FC03 of the points), ms. */
  readonly transactionMs: number;
  readonly commands: number;
  readonly alone: { readonly p50: Spread; readonly p99: Spread };
  readonly withPolls: { readonly p50: Spread; readonly p99: Spread };
  /** The polls' line time (keep-alives and reads, by frame size) / wall time: before the commands, and while they ran. */
  readonly pollShareAlone: Spread;
  readonly pollShare: Spread;
  /** p99 beside polls − (the floor's p99 + one transaction), per repeat: ≤ 0 meets the target. */
  readonly p99OverTarget: Spread;
}

const BUS_UNITS = 8;
const BUS_BAUD = 115200;
/** Long, and said so: at 1 s the 8 units' polls (FC06 + FC03 each) would take ~10 % of the line. */
const BUS_POLL_MS = 10_000;
/** The share of the line the polls are configured to take (by frame sizes) in the commands-beside-polls run. */
const BUS_POLL_SHARE = 0.5;

async function sharedBus(world: World, o: BenchOptions): Promise<BusResult> {
  const units = Array.from({ length: BUS_UNITS }, (_, i) => i + 1);
  const pty = world.teardown.add(await createPtyPair({ dir: fs.mkdtempSync(path.join(world.dir, "pty-")) }), (p) => p.close());
  const sim = world.teardown.add(
    await startSimulator({ serial: { path: pty.device, baud: BUS_BAUD }, units, lineRate: true, rate: 0 }),
    (s) => s.close(),
  );
  const fc16Ms = transactionLimitMs(9 + 2 * FENCED.COMMAND_COUNT, 8, BUS_BAUD);
  const fc06Ms = transactionLimitMs(8, 8, BUS_BAUD);
  const readRegs =
    Math.max(FENCED.TARGET_POSITION, FENCED.ACTUAL_POSITION, FENCED.STATUS) -
    Math.min(FENCED.TARGET_POSITION, FENCED.ACTUAL_POSITION, FENCED.STATUS) +
    1;
  const fc03Ms = transactionLimitMs(8, 5 + 2 * readRegs, BUS_BAUD);
  const limit = 1000 / fc16Ms;
  // A fenced poll is a keep-alive and a read; each unit polls again an interval after its last
  // poll ended. Sized for units polling in step (a round: the 8 polls' line time plus the
  // interval); as they drift apart they take more of the line. The measured share is reported.
  const roundMs = BUS_UNITS * (fc06Ms + fc03Ms);
  const halfLinePollMs = Math.round(roundMs / BUS_POLL_SHARE - roundMs);
  const transactionMs = Math.max(fc06Ms, fc03Ms);
  const sequential = o.quick ? 500 : 2000;
  const repeats = Math.max(1, Math.min(o.repeats, 3));
  const counted = () => ({ requests: sim.counters.requests, units: units.map((u) => sim.device(u)) });
  /** Commands, keep-alives and reads the line carried between two counts. */
  const carried = (before: ReturnType<typeof counted>, after: ReturnType<typeof counted>) => {
    const fc16 = after.units.reduce(
      (a, d, i) => a + d.appliedCount - before.units[i]!.appliedCount + d.refusalCount - before.units[i]!.refusalCount,
      0,
    );
    const keepAlives = after.units.reduce((a, d, i) => a + d.keepAlives - before.units[i]!.keepAlives, 0);
    return { fc16, keepAlives, reads: Math.max(0, after.requests - before.requests - fc16 - keepAlives) };
  };
  const pollShareOf = (c: ReturnType<typeof carried>, ms: number) => (c.keepAlives * fc06Ms + c.reads * fc03Ms) / ms;
  const gatewayOnLine = (pollIntervalMs: number, profileName?: string) =>
    startGateway(world, {
      buses: { rs485: { type: "rtu", path: pty.master, baudRate: BUS_BAUD, timeoutMs: 1000 } },
      actuators: units.map((u) => valve(`unit-${u}`, "rs485", u, "fenced", { pollIntervalMs })),
      ...(profileName ? { profileName } : {}),
    });
  const runs: {
    perSecond: number;
    occupancy: number;
    other: number;
    p99: number;
    direct: number;
    alone: Dist;
    withPolls: Dist;
    pollShareAlone: number;
    pollShare: number;
  }[] = [];
  for (let r = 0; r < repeats; r++) {
    const direct = await floorBusLine(pty, sim, units, Math.min(3000, o.windowMs));
    const gw = await gatewayOnLine(BUS_POLL_MS, r === 0 ? "bus" : undefined);
    const { clients, leases } = await acquireAll(
      world,
      `bus-${r}`,
      units.map((u) => `unit-${u}`),
    );
    const before = counted();
    const load = await closedLoop(gw, leases, o.windowMs, 500);
    if (r === 0) world.measured.set("bus", load.window);
    // The counters cover warm-up and drain too: scale by their own span, not the window.
    const { fc16, keepAlives, reads } = carried(before, counted());
    const otherShare = (keepAlives * fc06Ms + reads * fc03Ms) / (fc16 * fc16Ms + keepAlives * fc06Ms + reads * fc03Ms);
    const occupancy = (load.perSecond * fc16Ms) / 1000 / (1 - otherShare);
    let i = 0;
    const alone = dist(await timeEach(sequential, () => leases[0]!.command({ position: i++ % 100 })));
    await releaseAll(clients, leases);
    await gw.stop();

    const polled = await gatewayOnLine(halfLinePollMs);
    const beside = await acquireAll(world, `bus-polls-${r}`, ["unit-1"]);
    await sleep(2 * halfLinePollMs); // the polls under way
    const atStart = counted();
    let t0 = performance.now();
    await sleep(1000);
    const atCommands = counted();
    const pollShareAlone = pollShareOf(carried(atStart, atCommands), performance.now() - t0);
    t0 = performance.now();
    const withPolls = dist(await timeEach(sequential, () => beside.leases[0]!.command({ position: i++ % 100 })));
    const pollShare = pollShareOf(carried(atCommands, counted()), performance.now() - t0);
    await releaseAll(beside.clients, beside.leases);
    await polled.stop();

    runs.push({
      perSecond: load.perSecond,
      occupancy,
      other: (load.perSecond * (keepAlives + reads)) / Math.max(1, fc16),
      p99: load.latency.p99,
      direct,
      alone,
      withPolls,
      pollShareAlone,
      pollShare,
    });
    world.log(
      `  bus repeat ${r + 1}/${repeats}: ${load.perSecond.toFixed(1)} commands/s = ${((load.perSecond / limit) * 100).toFixed(1)} % of ${limit.toFixed(1)}/s; line occupancy ${(occupancy * 100).toFixed(1)} %; direct master ${direct.toFixed(1)}/s`,
    );
    world.log(
      `    one controller: alone p50 ${alone.p50.toFixed(2)} p99 ${alone.p99.toFixed(2)} ms; beside polls (${(pollShareAlone * 100).toFixed(0)} % of the line alone, ${(pollShare * 100).toFixed(0)} % beside the commands) p50 ${withPolls.p50.toFixed(2)} p99 ${withPolls.p99.toFixed(2)} ms (target p99 ≤ ${(alone.p99 + transactionMs).toFixed(2)})`,
    );
  }
  const perSecond = spread(runs.map((x) => x.perSecond));
  return {
    units: BUS_UNITS,
    baud: BUS_BAUD,
    pollIntervalMs: BUS_POLL_MS,
    commandLimitPerSecond: limit,
    perSecond,
    fractionOfLimit: spread(runs.map((x) => x.perSecond / limit)),
    lineOccupancy: spread(runs.map((x) => x.occupancy)),
    otherTransactionsPerSecond: spread(runs.map((x) => x.other)),
    p99: spread(runs.map((x) => x.p99)),
    directPerSecond: spread(runs.map((x) => x.direct)),
    fractionOfDirect: spread(runs.map((x) => x.perSecond / x.direct)),
    besidePolls: {
      pollIntervalMs: halfLinePollMs,
      transactionMs,
      commands: sequential,
      alone: { p50: spread(runs.map((x) => x.alone.p50)), p99: spread(runs.map((x) => x.alone.p99)) },
      withPolls: { p50: spread(runs.map((x) => x.withPolls.p50)), p99: spread(runs.map((x) => x.withPolls.p99)) },
      pollShareAlone: spread(runs.map((x) => x.pollShareAlone)),
      pollShare: spread(runs.map((x) => x.pollShare)),
      p99OverTarget: spread(runs.map((x) => x.withPolls.p99 - (x.alone.p99 + transactionMs))),
    },
  };
}

// ---------------------------------------------------------------------------------------
// Workload: contention (4 controllers, one actuator, short TTLs, no renewals)

export interface ContentionRepeat {
  readonly grants: number;
  readonly acquireRefusals: Record<string, number>;
  readonly commandRefusals: Record<string, number>;
  /** Commands not sent because the client saw a newer token on the state topic first. */
  readonly stoppedByClient: number;
  readonly applied: number;
  readonly appliedPerSecond: number;
  readonly device: { readonly applied: number; readonly refused: number; readonly fc16: number };
  /** Every gateway refusal cost no device transaction: device refusals 0, device applied = client applied. */
  readonly refusalsFree: boolean;
}

export interface ContentionResult {
  readonly controllers: number;
  readonly ttlMs: number;
  readonly repeats: readonly ContentionRepeat[];
  readonly appliedPerSecond: Spread;
  readonly grantsPerSecond: Spread;
  readonly refusalsPerSecond: Spread;
}

const CONTENDERS = 4;
const CONTENTION_TTL_MS = 200;

async function contention(world: World, o: BenchOptions): Promise<ContentionResult> {
  const pty = world.teardown.add(await createPtyPair({ dir: fs.mkdtempSync(path.join(world.dir, "pty-")) }), (p) => p.close());
  const sim = world.teardown.add(await startSimulator({ serial: { path: pty.device, baud: 115200 }, rate: 0 }), (s) => s.close());
  const repeats = Math.max(1, Math.min(o.repeats, 3));
  const runs: ContentionRepeat[] = [];
  const count = (m: Record<string, number>, k: string) => (m[k] = (m[k] ?? 0) + 1);
  for (let r = 0; r < repeats; r++) {
    const gw = await startGateway(world, {
      buses: { line: { type: "rtu", path: pty.master, baudRate: 115200, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "line", 1, "fenced", { pollIntervalMs: LATENCY_POLL_MS })],
    });
    const clients = await Promise.all(Array.from({ length: CONTENDERS }, (_, i) => connectClient(world, `bench-fight-${r}-${i}`)));
    const before = sim.device(1);
    const tally = {
      grants: 0,
      acquireRefusals: {} as Record<string, number>,
      commandRefusals: {} as Record<string, number>,
      stoppedByClient: 0,
      applied: 0,
    };
    let stop = false;
    const t0 = performance.now();
    const fighters = clients.map(async (client, k) => {
      while (!stop) {
        let lease: Lease;
        try {
          lease = await client.acquire("valve-1", { ttlMs: CONTENTION_TTL_MS, renewEveryMs: 1_000_000_000 });
          tally.grants++;
        } catch (err) {
          if (!(err instanceof FencegateError)) throw err;
          count(tally.acquireRefusals, err.code);
          // Come back when the holder's lease runs out (all of us at once: that is the fight).
          await sleep(Math.min(50, err.lease?.expiresInMs ?? 5) + Math.random() * 2);
          continue;
        }
        for (let i = 0; !stop; i++) {
          try {
            await lease.command({ position: (i * 13 + k) % 100 });
            tally.applied++;
          } catch (err) {
            if (err instanceof FencegateError) count(tally.commandRefusals, err.code);
            else if (err instanceof LeaseLostError) tally.stoppedByClient++;
            else throw err;
            break;
          }
        }
        await lease.release().catch(() => {});
      }
    });
    await sleep(o.windowMs);
    stop = true;
    await Promise.all(fighters);
    const elapsedMs = performance.now() - t0;
    await Promise.all(clients.map((c) => c.close()));
    await gw.stop();
    const after = sim.device(1);
    const device = { applied: after.appliedCount - before.appliedCount, refused: after.refusalCount - before.refusalCount, fc16: 0 };
    device.fc16 = device.applied + device.refused;
    const run: ContentionRepeat = {
      ...tally,
      appliedPerSecond: (tally.applied / elapsedMs) * 1000,
      device,
      refusalsFree: device.refused === 0 && device.applied === tally.applied,
    };
    runs.push(run);
    const refusals = Object.values(tally.commandRefusals).reduce((a, b) => a + b, 0);
    world.log(
      `  contention repeat ${r + 1}/${repeats}: ${tally.grants} grants, ${refusals} command refusals, ${run.appliedPerSecond.toFixed(0)} applied/s; device applied ${device.applied} refused ${device.refused}`,
    );
  }
  const secs = o.windowMs / 1000;
  return {
    controllers: CONTENDERS,
    ttlMs: CONTENTION_TTL_MS,
    repeats: runs,
    appliedPerSecond: spread(runs.map((x) => x.appliedPerSecond)),
    grantsPerSecond: spread(runs.map((x) => x.grants / secs)),
    refusalsPerSecond: spread(runs.map((x) => Object.values(x.commandRefusals).reduce((a, b) => a + b, 0) / secs)),
  };
}

// ---------------------------------------------------------------------------------------
// Workload: footprint (RSS idle and under load, startup to the first accepted command)

export interface FootprintRun {
  /** The daemon's Node (process.version). */
  readonly node: string;
  readonly runtime: "dist" | "tsx";
  readonly idleRssMb: Spread;
  readonly idleRss64Mb: Spread;
  readonly loadRss64Mb: Spread;
  readonly startupMs: Spread;
  /** Spawn to the daemon's "MQTT connected" log line. */
  readonly startupToMqttMs: Spread;
}

export interface FootprintResult {
  /** What bin/fencegate.mjs runs by default here: the compiled build when fresh, else tsx. */
  readonly runtime: "dist" | "tsx";
  /** The default on this Node, tsx on this Node for comparison, then dist on each other Node. */
  readonly runs: readonly FootprintRun[];
}

async function startupOnce(
  world: World,
  sim: SimulatorHandle,
  r: number,
  launch: Launch | undefined,
): Promise<{ firstCommandMs: number; mqttMs: number }> {
  const client = await connectClient(world, `bench-start-${r}-${randomUUID().slice(0, 4)}`);
  const dir = fs.mkdtempSync(path.join(world.dir, "start-"));
  const config = {
    ...gatewayConfig({
      brokerUrl: world.broker.url,
      journalPath: path.join(dir, "journal.db"),
      ...tcpSetup([sim], LATENCY_POLL_MS),
      metricsPort: await freePort(),
    }),
    logging: { level: "info" },
  };
  const wallStart = Date.now();
  const t0 = performance.now();
  const daemon = DaemonProcess.start(dir, config, launch ? { node: launch.node, bin: launch.bin } : {});
  let token = 0;
  for (;;) {
    try {
      const reply = await client.request("valve-0", "lease/acquire", { holder: client.holder, ttlMs: 5000 }, { timeoutMs: 100 });
      token = (reply.lease as { token: number }).token;
      break;
    } catch {
      await sleep(2);
    }
    if (performance.now() - t0 > 30_000)
      throw new Error(
        `the daemon did not grant a lease within 30 s; stderr: ${daemon.stderr}; last lines: ${JSON.stringify(daemon.logs.slice(-5))}`,
      );
  }
  await client.request("valve-0", "command", { holder: client.holder, token, seq: 0, set: { position: 10 } });
  const firstCommandMs = performance.now() - t0;
  const connected = await daemon.waitForLog((l) => l.msg === "MQTT connected");
  await client.close();
  await stopDaemon(daemon);
  fs.rmSync(dir, { recursive: true, force: true });
  return { firstCommandMs, mqttMs: Number(connected["time"]) - wallStart };
}

async function footprintOf(
  world: World,
  o: BenchOptions,
  sims: readonly SimulatorHandle[],
  runtime: "dist" | "tsx",
  launch?: Launch,
): Promise<FootprintRun> {
  // Both ways on purpose, whatever the sources' mtimes say meanwhile (others edit them).
  process.env["FENCEGATE_RUNTIME"] = runtime;
  const node = launch?.label ?? process.version;
  const label = `${runtime} on node ${node}`;
  try {
    const startup: { firstCommandMs: number; mqttMs: number }[] = [];
    for (let r = 0; r < o.repeats; r++) startup.push(await startupOnce(world, sims[0]!, r, launch));
    world.log(`  ${label}: startup to first applied command: ${spread(startup.map((s) => s.firstCommandMs)).median.toFixed(0)} ms`);
    const idle: number[] = [];
    const idle64: number[] = [];
    const load64: number[] = [];
    const repeats = Math.max(1, Math.min(o.repeats, 3));
    for (let r = 0; r < repeats; r++) {
      const one = await startGateway(world, { ...tcpSetup(sims.slice(0, 1), LATENCY_POLL_MS), ...(launch ? { launch } : {}) });
      await sleep(3000);
      idle.push(rssMb(one.pid));
      await one.stop();
      const gw = await startGateway(world, { ...tcpSetup(sims, LATENCY_POLL_MS), ...(launch ? { launch } : {}) });
      await sleep(3000);
      idle64.push(rssMb(gw.pid));
      const { clients, leases } = await acquireAll(
        world,
        `foot-${runtime}-${r}`,
        sims.map((_, i) => `valve-${i}`),
      );
      const load = await closedLoop(gw, leases, o.windowMs, 500);
      load64.push(load.rssMaxMb);
      await releaseAll(clients, leases);
      await gw.stop();
      world.log(
        `  ${label}: footprint repeat ${r + 1}/${repeats}: idle ${idle.at(-1)!.toFixed(1)} MB, 64 idle ${idle64.at(-1)!.toFixed(1)} MB, 64 under load ${load64.at(-1)!.toFixed(1)} MB`,
      );
    }
    return {
      node,
      runtime,
      idleRssMb: spread(idle),
      idleRss64Mb: spread(idle64),
      loadRss64Mb: spread(load64),
      startupMs: spread(startup.map((s) => s.firstCommandMs)),
      startupToMqttMs: spread(startup.map((s) => s.mqttMs)),
    };
  } finally {
    process.env["FENCEGATE_RUNTIME"] = world.runtime;
  }
}

/**
 * Where `node` (another Node binary) can run the build: tmp/bench-node-abi<N>/, a copy of
 * node_modules with better-sqlite3 rebuilt for that Node's ABI (made once and kept; the
 * shared node_modules is built for this Node and stays as it is), with fresh copies of
 * bin/, dist/, config/, the status page's files and package.json beside it.
 */
function installFor(node: string, log: (line: string) => void): Launch {
  const probe = spawnSync(node, ["-p", "process.version + ' ' + process.versions.modules"], { encoding: "utf8" });
  if (probe.status !== 0) throw new Error(`--node ${node}: cannot run it (${probe.stderr.trim()})`);
  const [version, abi] = probe.stdout.trim().split(" ") as [string, string];
  const root = path.join(repo, "tmp", `bench-node-abi${abi}`);
  const ready = path.join(root, "node_modules", ".fencegate-bench-ready");
  if (!fs.existsSync(ready)) {
    log(
      `  node ${version} (ABI ${abi}): copying node_modules to ${path.relative(repo, root)} and rebuilding better-sqlite3 for it (once; a minute or two)`,
    );
    fs.rmSync(root, { recursive: true, force: true });
    fs.mkdirSync(root, { recursive: true });
    fs.cpSync(path.join(repo, "node_modules"), path.join(root, "node_modules"), { recursive: true, verbatimSymlinks: true });
    fs.writeFileSync(path.join(root, "package.json"), JSON.stringify({ name: "fencegate-bench-node", private: true }));
    // npm's own CLI run by that Node, against that Node's headers (as .ci/run does for the suite).
    const npmCli =
      process.env["npm_execpath"] ?? fs.realpathSync(spawnSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).stdout.trim());
    const nodeDir = path.dirname(path.dirname(node));
    const env = { ...process.env, npm_config_nodedir: nodeDir, PATH: `${path.dirname(node)}:${process.env["PATH"] ?? ""}` };
    const rebuilt = spawnSync(node, [npmCli, "rebuild", "better-sqlite3"], { cwd: root, env, encoding: "utf8" });
    const loads = spawnSync(node, ["-e", "new (require('better-sqlite3'))(':memory:').close()"], { cwd: root, encoding: "utf8" });
    if (rebuilt.status !== 0 || loads.status !== 0)
      throw new Error(`--node ${node}: better-sqlite3 could not be rebuilt for it:\n${rebuilt.stdout}${rebuilt.stderr}${loads.stderr}`);
    fs.writeFileSync(ready, `${version}\n`);
  }
  // What the daemon reads at run time beside node_modules (the status page's files from the sources' tree).
  for (const d of ["bin", "dist", "config", "src/adapters/http/status-page"]) {
    fs.rmSync(path.join(root, d), { recursive: true, force: true });
    fs.mkdirSync(path.dirname(path.join(root, d)), { recursive: true });
    fs.cpSync(path.join(repo, d), path.join(root, d), { recursive: true });
  }
  fs.copyFileSync(path.join(repo, "package.json"), path.join(root, "package.json"));
  return { label: version, node, bin: path.join(root, "bin", "fencegate.mjs") };
}

async function footprint(world: World, o: BenchOptions): Promise<FootprintResult> {
  const sims = await tcpSims(world, 64);
  const runtime = fs.existsSync(DIST_MAIN) ? "dist" : "tsx";
  const runs: FootprintRun[] = [];
  // The default first; the sources through tsx as well, for comparison, when a build exists.
  runs.push(await footprintOf(world, o, sims, runtime));
  if (runtime === "dist") runs.push(await footprintOf(world, o, sims, "tsx"));
  for (const node of o.nodes) {
    if (!fs.existsSync(DIST_MAIN)) throw new Error(`--node ${node}: another Node runs the build, and dist/ is missing (npm run build)`);
    runs.push(await footprintOf(world, o, sims, "dist", installFor(node, world.log)));
  }
  return { runtime, runs };
}

// ---------------------------------------------------------------------------------------
// CPU profile summary

export interface ProfileSummary {
  readonly file: string;
  /** Only the samples in this window were counted (the measuring window; not start-up, warm-up or shutdown). */
  readonly window: MeasuredWindow | null;
  /** CPU the profile saw busy in the window, ms (one thread's: the main thread). */
  readonly totalMs: number;
  /** totalMs per command answered in the window. */
  readonly msPerCommand: number | null;
  /** The garbage collector's share of totalMs. */
  readonly gcShare: number;
  readonly byArea: { area: string; ms: number; share: number }[];
  readonly topFunctions: { fn: string; ms: number; share: number }[];
}

interface CpuNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  hitCount?: number;
}

/**
 * Where a frame of the bundled dist/ comes from: its source map (beside each chunk, as
 * esbuild writes it) names the source file and line, so the summary says
 * src/adapters/journal/sqlite.ts, not chunk-XXXX.js. Frames elsewhere stay as they are.
 */
function sourceMapper(): (url: string, line: number, column: number) => { url: string; line: number } {
  const maps = new Map<string, SourceMap | null>();
  const mapOf = (url: string): SourceMap | null => {
    if (!maps.has(url)) {
      let map: SourceMap | null = null;
      try {
        const file = fileURLToPath(url);
        map = new SourceMap(JSON.parse(fs.readFileSync(`${file}.map`, "utf8")));
      } catch {
        map = null; // no map (not a built chunk): keep the frame as it is
      }
      maps.set(url, map);
    }
    return maps.get(url)!;
  };
  return (url, line, column) => {
    if (!url.startsWith("file:") || !url.includes("/dist/")) return { url, line };
    const entry = mapOf(url)?.findEntry(line, column);
    if (!entry || !("originalSource" in entry) || !entry.originalSource) return { url, line };
    return { url: new URL(entry.originalSource, url).href, line: entry.originalLine };
  };
}

function areaOf(url: string, fn: string): string {
  if (url === "") return fn.startsWith("(") ? fn : "(native)";
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  if (url.startsWith("node:")) return `node:${url.slice(5).split("/")[0]}`;
  const local = /\/(src|firmware-bridge|dist)\/(.*)$/.exec(url);
  if (local) return `${local[1]}/${local[2]!.replace(/\?.*$/, "")}`;
  return url;
}

export function summariseProfile(file: string, window?: MeasuredWindow): ProfileSummary {
  const profile = JSON.parse(fs.readFileSync(file, "utf8")) as {
    nodes: CpuNode[];
    startTime: number;
    samples: number[];
    timeDeltas: number[];
  };
  const msById = new Map<number, number>();
  let atUs = profile.startTime;
  profile.samples.forEach((id, i) => {
    const deltaUs = profile.timeDeltas[i] ?? 0;
    atUs += deltaUs;
    if (window && (atUs < window.startUs || atUs > window.endUs)) return;
    msById.set(id, (msById.get(id) ?? 0) + deltaUs / 1000);
  });
  const byArea = new Map<string, number>();
  const byFn = new Map<string, number>();
  const toSource = sourceMapper();
  let total = 0;
  for (const node of profile.nodes) {
    const ms = msById.get(node.id) ?? 0;
    if (ms === 0) continue;
    const { functionName } = node.callFrame;
    if (functionName === "(idle)") continue;
    const { url, line: lineNumber } = toSource(node.callFrame.url, node.callFrame.lineNumber, node.callFrame.columnNumber);
    total += ms;
    const area = areaOf(url, functionName);
    byArea.set(area, (byArea.get(area) ?? 0) + ms);
    const key = `${functionName || "(anonymous)"} ${area}:${lineNumber + 1}`;
    byFn.set(key, (byFn.get(key) ?? 0) + ms);
  }
  const top = (m: Map<string, number>, n: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, ms]) => ({ k, ms, share: ms / total }));
  return {
    file,
    window: window ?? null,
    totalMs: total,
    msPerCommand: window ? total / Math.max(1, window.commands) : null,
    gcShare: (byArea.get("(garbage collector)") ?? 0) / total,
    byArea: top(byArea, 15).map(({ k, ms, share }) => ({ area: k, ms, share })),
    topFunctions: top(byFn, 20).map(({ k, ms, share }) => ({ fn: k, ms, share })),
  };
}

// ---------------------------------------------------------------------------------------
// The run

export interface BenchResult {
  readonly at: string;
  readonly machine: { cpus: number; cpuModel: string; node: string; loadavgBefore: number[]; loadavgAfter: number[]; totalMemMb: number };
  readonly options: BenchOptions;
  /** What the daemon ran from. */
  runtime?: "dist" | "tsx";
  /** On this machine's disk. */
  latency?: LatencyResult;
  /** The same with every journal fdatasync slower, by each of options.slowSyncMs. */
  latencySlowDisk?: LatencyResult[];
  scale?: ScalePoint[];
  /** The same with every journal fdatasync slower by the smallest of options.slowSyncMs. */
  scaleSlowDisk?: ScalePoint[];
  bus?: BusResult;
  contention?: ContentionResult;
  footprint?: FootprintResult;
  profiles?: ProfileSummary[];
  readonly targets: Target[];
}

export interface Target {
  readonly name: string;
  /** What was measured (medians of the repeats). */
  readonly value: string;
  /** What it is judged against, measured in the same run ("" when the target is absolute). */
  readonly floor: string;
  readonly target: string;
  readonly met: boolean;
}

export async function runBench(o: BenchOptions): Promise<BenchResult> {
  const print = (line: string) => o.print && console.log(line);
  const tmpRoot = path.join(repo, "tmp");
  fs.mkdirSync(tmpRoot, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const teardown = new Teardown();
  const dir = teardown.add(fs.mkdtempSync(path.join(tmpRoot, `bench-gw-${stamp}-`)), (d) => fs.rmSync(d, { recursive: true, force: true }));
  const profileDir = o.profile ? path.join(tmpRoot, `profile-${stamp}`) : null; // kept after the run
  if (profileDir) fs.mkdirSync(profileDir, { recursive: true });
  const measured = new Map<string, MeasuredWindow>();
  const result: BenchResult = {
    at: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? "?",
      node: process.version,
      loadavgBefore: os.loadavg(),
      loadavgAfter: [],
      totalMemMb: Math.round(os.totalmem() / 2 ** 20),
    },
    options: o,
    targets: [],
  };
  print(
    `fencegate bench — ${result.machine.cpus} × ${result.machine.cpuModel}, node ${process.version}, load ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  print(`workloads: ${o.only.join(", ")}; ${o.repeats} repeats${o.quick ? " (quick)" : ""}; files in ${path.relative(repo, dir)}`);
  if (o.build && !distIsFresh()) {
    // A production install runs the compiled build: measure that.
    print("dist/ is missing or older than the sources: npm run build");
    const built = spawnSync("npm", ["run", "build"], { cwd: repo, encoding: "utf8" });
    if (built.status !== 0) print(`npm run build failed (${built.status}); the daemon runs through tsx\n${built.stdout}${built.stderr}`);
  }
  const runtime = o.build && fs.existsSync(DIST_MAIN) ? "dist" : distIsFresh() ? "dist" : "tsx";
  result.runtime = runtime;
  const runtimeBefore = process.env["FENCEGATE_RUNTIME"];
  process.env["FENCEGATE_RUNTIME"] = runtime; // while others edit the sources, the build goes stale under us
  print(`the daemon runs from ${runtime === "dist" ? "dist/ (compiled)" : "the sources through tsx"}`);
  try {
    const broker = teardown.add(await startMosquitto(), (b) => b.stop());
    const world: World = { teardown, dir, broker, profileDir, measured, log: print, runtime };
    for (const w of o.only) {
      print(`\n${w}:`);
      if (w === "latency") {
        result.latency = await latency(world, o);
        if (o.slowSyncMs.length > 0) result.latencySlowDisk = [];
        for (const ms of o.slowSyncMs) result.latencySlowDisk!.push(await latency(world, o, ms));
      }
      if (w === "scale") {
        result.scale = await scale(world, o);
        if (o.slowSyncMs.length > 0) result.scaleSlowDisk = await scale(world, o, Math.min(...o.slowSyncMs));
      }
      if (w === "bus") result.bus = await sharedBus(world, o);
      if (w === "contention") result.contention = await contention(world, o);
      if (w === "footprint") result.footprint = await footprint(world, o);
    }
  } finally {
    if (runtimeBefore === undefined) delete process.env["FENCEGATE_RUNTIME"];
    else process.env["FENCEGATE_RUNTIME"] = runtimeBefore;
    await teardown.run();
  }
  if (profileDir) {
    // Per profiled daemon, the busiest thread's profile (the main thread, not the loader's worker).
    result.profiles = fs.readdirSync(profileDir).flatMap((name) => {
      const sub = path.join(profileDir, name);
      const files = fs
        .readdirSync(sub)
        .filter((f) => f.endsWith(".cpuprofile"))
        .map((f) => summariseProfile(path.join(sub, f), measured.get(name)));
      return files.sort((a, b) => b.totalMs - a.totalMs).slice(0, 1);
    });
  }
  result.machine.loadavgAfter.push(...os.loadavg());
  judge(result);
  if (o.print) report(result);
  if (o.write) {
    const out = path.join(repo, "bench", "results", `gateway-${stamp}.json`);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    print(`\nwrote ${path.relative(repo, out)}`);
  }
  return result;
}

function judge(r: BenchResult): void {
  const t = r.targets;
  const pct = (x: number) => `${(x * 100).toFixed(1)} %`;
  const ms = (x: number) => `${x.toFixed(3)} ms`;
  const L = r.latency;
  if (L) {
    const mqttModbus = (a: Spread, b: Spread) => `MQTT ${ms(a.median)} + Modbus ${ms(b.median)}`;
    t.push({
      name: "command p50 / its floors' p50 sum",
      value: `${ms(L.p50.median)} = ×${L.ratioP50.median.toFixed(2)}`,
      floor: mqttModbus(L.floors.mqttP50, L.floors.modbusP50),
      target: "≤ ×1.3",
      met: L.ratioP50.median <= 1.3,
    });
    t.push({
      name: "command p99 / its floors' p99 sum",
      value: `${ms(L.p99.median)} = ×${L.ratioP99.median.toFixed(2)}`,
      floor: mqttModbus(L.floors.mqttP99, L.floors.modbusP99),
      target: "≤ ×3",
      met: L.ratioP99.median <= 3,
    });
    for (const S of r.latencySlowDisk ?? []) {
      const ratio = S.p50.median / L.p50.median;
      t.push({
        name: `command p50, fdatasync +${S.slowSyncMs} ms / undelayed`,
        value: `${ms(S.p50.median)} = ×${ratio.toFixed(2)}`,
        floor: `undelayed p50 ${ms(L.p50.median)}`,
        target: "≤ ×1.1",
        met: ratio <= 1.1,
      });
      t.push({
        name: `acquire p50, fdatasync +${S.slowSyncMs} ms`,
        value: ms(S.acquireP50.median),
        floor: `the delay; undelayed acquire p50 ${ms(L.acquireP50.median)}`,
        target: `≥ ${S.slowSyncMs} ms`,
        met: S.acquireP50.median >= S.slowSyncMs,
      });
    }
  }
  if (r.bus) {
    t.push({
      name: "shared bus commands / line limit",
      value: pct(r.bus.fractionOfLimit.median),
      floor: `${r.bus.commandLimitPerSecond.toFixed(1)}/s`,
      target: "≥ 90 %",
      met: r.bus.fractionOfLimit.median >= 0.9,
    });
    const P = r.bus.besidePolls;
    const bound = P.alone.p99.median + P.transactionMs;
    t.push({
      name: "shared bus command p99 beside half-line polls",
      value: `${P.withPolls.p99.median.toFixed(2)} ms`,
      floor: `alone p99 ${P.alone.p99.median.toFixed(2)} ms + ${P.transactionMs.toFixed(2)} ms`,
      target: `≤ ${bound.toFixed(2)} ms = floor p99 + 1 transaction`,
      met: P.withPolls.p99.median <= bound,
    });
  }
  const scaleTargets = (points: readonly ScalePoint[] | undefined, disk: string) => {
    const base = points?.[0];
    for (const p of (points ?? []).filter((p) => p.actuators > 1 && p.actuators <= 16)) {
      const floor = `${p.actuators} × ${base!.perSecond.median.toFixed(0)}/s at ${base!.actuators}`;
      t.push({
        name: `scale-out ${p.actuators} actuators vs linear, ${disk}`,
        value: `${p.perSecond.median.toFixed(0)}/s = ×${p.growthVsLinear.toFixed(2)}`,
        floor,
        target: "≥ ×0.7",
        met: p.growthVsLinear >= 0.7,
      });
    }
  };
  scaleTargets(r.scale, "this disk");
  scaleTargets(r.scaleSlowDisk, `fdatasync +${Math.min(...r.options.slowSyncMs)} ms`);
  const busy16 = r.scale?.find((p) => p.actuators === 16);
  if (busy16) {
    const cpu = busy16.daemonCpuMsPerCommand.median;
    t.push({
      name: "gateway CPU per command, 16 busy actuators",
      value: ms(cpu),
      floor: `daemon ${busy16.daemonCpuPercent.median.toFixed(0)} % of a core`,
      target: "≤ 0.150 ms",
      met: cpu <= 0.15,
    });
  }
  if (r.contention) {
    const free = r.contention.repeats.every((x) => x.refusalsFree);
    t.push({ name: "contention: refusals cost no device transaction", value: free ? "yes" : "NO", floor: "", target: "yes", met: free });
  }
  if (r.footprint) {
    // The default runtime on this Node, and the build on every other Node; tsx here is for comparison.
    for (const f of r.footprint.runs.filter((f, i) => i === 0 || f.node !== r.machine.node)) {
      const rt = `(${f.runtime}, node ${f.node})`;
      t.push({
        name: `idle RSS, 1 actuator ${rt}`,
        value: `${f.idleRssMb.median.toFixed(1)} MB`,
        floor: "",
        target: "≤ 80 MB",
        met: f.idleRssMb.median <= 80,
      });
      t.push({
        name: `RSS, 64 actuators under load ${rt}`,
        value: `${f.loadRss64Mb.median.toFixed(1)} MB`,
        floor: "",
        target: "≤ 120 MB",
        met: f.loadRss64Mb.median <= 120,
      });
      t.push({
        name: `startup to first applied command ${rt}`,
        value: `${f.startupMs.median.toFixed(0)} ms`,
        floor: "",
        target: "≤ 1500 ms",
        met: f.startupMs.median <= 1500,
      });
    }
  }
}

function report(r: BenchResult): void {
  const ms = (x: number) => x.toFixed(3).padStart(8);
  const sp = (s: Spread, d = 3) =>
    `${s.median.toFixed(d)} [${s.min.toFixed(d)}–${s.max.toFixed(d)}, spread ${(s.spread * 100).toFixed(0)} %]`;
  console.log(`\n=== results (median of repeats [min–max, (max-min)/median]) ===`);
  console.log(`daemon runtime: ${r.runtime ?? "?"}`);
  console.log(
    `machine: ${r.machine.cpus} cores (${r.machine.cpuModel}), node ${r.machine.node}, load before ${r.machine.loadavgBefore.map((l) => l.toFixed(2)).join(" ")}, after ${r.machine.loadavgAfter.map((l) => l.toFixed(2)).join(" ")}`,
  );
  const latencyTable = (L: LatencyResult) => {
    const disk = L.slowSyncMs ? `, every journal fdatasync +${L.slowSyncMs} ms (an SD card, emulated)` : ", this disk";
    console.log(`\nfloors (ms) beside the latency run${disk}: p50 (median of repeats), p99`);
    console.log(`  (1) MQTT req/resp, bare echo    ${sp(L.floors.mqttP50)}   ${sp(L.floors.mqttP99)}`);
    console.log(
      `  (2) journal commit, 1 record    ${sp(L.floors.journalP50)}   ${sp(L.floors.journalP99)}   (an acquire's floor, not a command's)`,
    );
    console.log(`  (3) Modbus FC16 7 regs, pty     ${sp(L.floors.modbusP50)}   ${sp(L.floors.modbusP99)}`);
    console.log(
      `  command floor (1) + (3)         ${ms(L.floors.mqttP50.median + L.floors.modbusP50.median)}   ${ms(L.floors.mqttP99.median + L.floors.modbusP99.median)}`,
    );
    console.log(`  acquire floor (1) + (2) + delay ${ms(L.floors.mqttP50.median + L.floors.journalP50.median + L.slowSyncMs)}`);
    console.log(
      `latency${disk}: 1 controller, 1 actuator on a pty, sequential, ${r.options.latencyCommands} commands × ${L.repeats.length} repeats, poll every ${L.pollIntervalMs} ms`,
    );
    console.log(`  command p50      ${sp(L.p50)} ms   ratio to its floors' p50 sum ×${sp(L.ratioP50, 2)}`);
    console.log(`  command p99      ${sp(L.p99)} ms   ratio to its floors' p99 sum ×${sp(L.ratioP99, 2)}`);
    console.log(`  command p99.9    ${sp(L.p999)} ms`);
    console.log(
      `  pooled (n=${L.pooled.n}): p50 ${L.pooled.p50.toFixed(3)}, p99 ${L.pooled.p99.toFixed(3)}, p99.9 ${L.pooled.p999.toFixed(3)}, max ${L.pooled.max.toFixed(3)} ms`,
    );
    console.log(
      `  acquire p50      ${sp(L.acquireP50)} ms   ratio to its floor ×${sp(L.acquireRatioP50, 2)}; p99 ${sp(L.acquireP99)} ms (n=${L.repeats[0]?.acquire.n ?? 0} per repeat)`,
    );
    console.log(`  daemon CPU per command ${sp(L.daemonCpuMsPerCommand)} ms`);
  };
  if (r.latency) latencyTable(r.latency);
  for (const L of r.latencySlowDisk ?? []) latencyTable(L);
  const scaleTable = (points: readonly ScalePoint[], disk: string) => {
    console.log(
      `\nscale-out, ${disk}: N actuators on N Modbus TCP links, one controller each, closed loop, ${r.options.windowMs} ms windows`,
    );
    console.log(
      `  ${"N".padStart(3)}  ${"commands/s".padEnd(36)} ${"vs linear".padEnd(10)} ${"p50 ms".padEnd(8)} ${"p99 ms".padEnd(36)} CPU %: daemon bench machine  daemon CPU ms/command  RSS max MB`,
    );
    for (const p of points) {
      const cpu = `${p.daemonCpuPercent.median.toFixed(0).padStart(6)} ${p.benchCpuPercent.median.toFixed(0).padStart(5)} ${p.machineBusyPercent.median.toFixed(0).padStart(7)}`;
      console.log(
        `  ${String(p.actuators).padStart(3)}  ${sp(p.perSecond, 0).padEnd(36)} ${`×${p.growthVsLinear.toFixed(2)}`.padEnd(10)} ${p.p50.median.toFixed(2).padEnd(8)} ${sp(p.p99, 2).padEnd(36)} ${cpu}        ${p.daemonCpuMsPerCommand.median.toFixed(3).padStart(8)}              ${p.rssMaxMb.median.toFixed(1)}`,
      );
    }
    console.log(`  (CPU: daemon and bench in % of one core; machine in % of all ${r.machine.cpus} cores, everyone's work included)`);
  };
  if (r.scale) scaleTable(r.scale, "this disk");
  if (r.scaleSlowDisk)
    scaleTable(r.scaleSlowDisk, `every journal fdatasync +${Math.min(...r.options.slowSyncMs)} ms (an SD card, emulated)`);
  if (r.bus) {
    const B = r.bus;
    console.log(`\nshared bus: ${B.units} units on one pty line, line-rate emulated at ${B.baud} baud, polls every ${B.pollIntervalMs} ms`);
    console.log(`  line limit for FC16 7 regs (23 + 8 bytes, 2 × t3.5): ${B.commandLimitPerSecond.toFixed(1)} commands/s`);
    console.log(`  commands/s       ${sp(B.perSecond, 1)}`);
    console.log(`  of line limit    ${sp(B.fractionOfLimit, 3)}`);
    console.log(
      `  direct master, no gateway (the ceiling here) ${sp(B.directPerSecond, 1)} commands/s = ${(B.directPerSecond.median / B.commandLimitPerSecond).toFixed(3)} of the limit; gateway / direct ${sp(B.fractionOfDirect, 3)}`,
    );
    console.log(`  line occupancy   ${sp(B.lineOccupancy, 3)} (commands + polls + keep-alives, by frame size)`);
    console.log(`  other transactions/s (polls, keep-alives) ${sp(B.otherTransactionsPerSecond, 1)}; command p99 ${sp(B.p99, 1)} ms`);
    const P = B.besidePolls;
    console.log(`  one controller, ${P.commands} sequential commands to unit 1 × ${B.perSecond.values.length} repeats:`);
    console.log(`    alone (the floor; polls every ${B.pollIntervalMs} ms)   p50 ${sp(P.alone.p50, 2)}   p99 ${sp(P.alone.p99, 2)} ms`);
    console.log(
      `    beside polls every ${P.pollIntervalMs} ms            p50 ${sp(P.withPolls.p50, 2)}   p99 ${sp(P.withPolls.p99, 2)} ms`,
    );
    console.log(
      `    the polls' share of the line (by frame sizes): alone ${sp(P.pollShareAlone, 3)} (configured ${BUS_POLL_SHARE}); beside the commands ${sp(P.pollShare, 3)}`,
    );
    console.log(
      `    one transaction at ${B.baud} baud (the longest poll transaction) ${P.transactionMs.toFixed(2)} ms; p99 − (floor p99 + it) ${sp(P.p99OverTarget, 2)} ms (≤ 0 meets)`,
    );
  }
  if (r.contention) {
    const C = r.contention;
    console.log(`\ncontention: ${C.controllers} controllers, 1 actuator, TTL ${C.ttlMs} ms, no renewals`);
    for (const [i, x] of C.repeats.entries()) {
      console.log(
        `  repeat ${i + 1}: grants ${x.grants}, acquire refusals ${JSON.stringify(x.acquireRefusals)}, command refusals ${JSON.stringify(x.commandRefusals)}, stopped by client ${x.stoppedByClient}`,
      );
      console.log(
        `            applied ${x.applied} (${x.appliedPerSecond.toFixed(0)}/s); device: applied ${x.device.applied}, refused ${x.device.refused} → refusals cost no device transaction: ${x.refusalsFree ? "yes" : "NO"}`,
      );
    }
    console.log(`  applied/s ${sp(C.appliedPerSecond, 0)}; grants/s ${sp(C.grantsPerSecond, 1)}; refusals/s ${sp(C.refusalsPerSecond, 1)}`);
  }
  if (r.footprint) {
    console.log(`\nfootprint (bin/fencegate.mjs runs ${r.footprint.runtime} here)`);
    for (const F of r.footprint.runs) {
      const rt = `${F.runtime}, node ${F.node}:`.padEnd(22);
      console.log(`  ${rt} RSS idle, 1 actuator             ${sp(F.idleRssMb, 1)} MB`);
      console.log(`  ${rt} RSS idle, 64 actuators           ${sp(F.idleRss64Mb, 1)} MB`);
      console.log(`  ${rt} RSS max, 64 under load           ${sp(F.loadRss64Mb, 1)} MB`);
      console.log(`  ${rt} startup → MQTT connected         ${sp(F.startupToMqttMs, 0)} ms`);
      console.log(`  ${rt} startup → first applied command  ${sp(F.startupMs, 0)} ms`);
    }
  }
  for (const p of r.profiles ?? []) {
    const per =
      p.window && p.msPerCommand !== null
        ? ` in the measuring window (${((p.window.endUs - p.window.startUs) / 1000).toFixed(0)} ms, ${p.window.commands} commands): ${p.msPerCommand.toFixed(3)} ms per command on the main thread`
        : " (whole run)";
    console.log(
      `\nCPU profile ${path.relative(repo, p.file)}: ${p.totalMs.toFixed(0)} ms busy${per}; GC ${(p.gcShare * 100).toFixed(1)} %`,
    );
    console.log(
      `  by area:   ${p.byArea
        .slice(0, 10)
        .map((a) => `${a.area} ${(a.share * 100).toFixed(1)}%`)
        .join(", ")}`,
    );
    for (const f of p.topFunctions.slice(0, 20)) console.log(`    ${(f.share * 100).toFixed(1).padStart(5)} %  ${f.fn}`);
  }
  console.log(
    `\ntargets (load before ${r.machine.loadavgBefore.map((l) => l.toFixed(2)).join(" ")}, after ${r.machine.loadavgAfter.map((l) => l.toFixed(2)).join(" ")}):`,
  );
  const w = (pick: (t: Target) => string, min: number) => Math.max(min, ...r.targets.map((t) => pick(t).length));
  const [wn, wv, wf, wt] = [w((t) => t.name, 6), w((t) => t.value, 8), w((t) => t.floor, 5), w((t) => t.target, 6)];
  console.log(`  ${"target".padEnd(wn)}  ${"measured".padEnd(wv)}  ${"floor".padEnd(wf)}  ${"bound".padEnd(wt)}  result`);
  for (const t of r.targets)
    console.log(`  ${t.name.padEnd(wn)}  ${t.value.padEnd(wv)}  ${t.floor.padEnd(wf)}  ${t.target.padEnd(wt)}  ${t.met ? "PASS" : "MISS"}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      only: { type: "string" },
      quick: { type: "boolean", default: false },
      repeats: { type: "string" },
      profile: { type: "boolean", default: false },
      "slow-sync-ms": { type: "string" },
      node: { type: "string", multiple: true },
      scale: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(
      `usage: npm run bench -- [--only ${WORKLOADS.join(",")}] [--quick] [--repeats N] [--profile] [--slow-sync-ms N[,N…] (0: no slow-disk runs)] [--scale 1,4,16,64] [--node /path/to/other/node …]`,
    );
    return;
  }
  const base = defaultOptions(values.quick);
  const only = values.only ? values.only.split(",").map((s) => s.trim()) : [...WORKLOADS];
  for (const w of only)
    if (!(WORKLOADS as readonly string[]).includes(w)) throw new Error(`--only: unknown workload "${w}" (${WORKLOADS.join(", ")})`);
  const slowSyncMs = values["slow-sync-ms"] === undefined ? base.slowSyncMs : values["slow-sync-ms"].split(",").map(Number);
  if (!slowSyncMs.every((ms) => Number.isFinite(ms) && ms >= 0 && ms <= 1000))
    throw new Error("--slow-sync-ms: numbers of milliseconds from 0 to 1000, separated by commas");
  const nodes = (values.node ?? []).map((n) => path.resolve(n));
  const scaleCounts = values.scale === undefined ? base.scaleCounts : values.scale.split(",").map(Number);
  if (!scaleCounts.every((n) => Number.isSafeInteger(n) && n >= 1 && n <= 64))
    throw new Error("--scale: actuator counts from 1 to 64, separated by commas (the first is the base of linear)");
  await runBench({
    ...base,
    only: only as Workload[],
    repeats: values.repeats ? Number(values.repeats) : base.repeats,
    profile: values.profile,
    slowSyncMs: slowSyncMs.filter((ms) => ms > 0),
    nodes,
    scaleCounts,
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
