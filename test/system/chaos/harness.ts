/**
 * Chaos on real processes: the daemon (`fencegate daemon`), Mosquitto, the simulated fenced
 * valve (`fencegate sim` on a socat pty pair, with an EEPROM state file and a control
 * socket) and several controller processes (test/system/chaos/controller.ts, the client library),
 * under continuous load, while a seeded schedule
 *
 *  - SIGKILLs the daemon at random moments and starts it again on the same journal,
 *  - SIGSTOPs a controller for longer than its lease's TTL, then SIGCONTs it,
 *  - SIGKILLs the broker and starts it again on the same port,
 *  - cuts the serial link (kills socat; the simulator is stopped and started again on a
 *    new pty pair at the same paths: the cable is re-plugged),
 *  - power-cycles the device through its control socket,
 *  - SIGKILLs a controller and starts it again at once under the same holder (it gets its
 *    live lease's token back: the new process must not reuse that token's seqs).
 *
 * Afterwards {@link check} judges the histories: the device's own applied log (from every
 * simulator life), every controller's log, and the daemon's "journal loaded"/"granted" lines.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { sendControl, type ControlCommand } from "../../../firmware-bridge/src/simulator.ts";
import { bundleCli } from "../../support/bundle.ts";
import { DaemonProcess, gatewayConfig, valve, type LogLine } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { startProcess, stopProcess, type ChildProcess } from "../../support/processes.ts";
import { startSimProcess, type SimProcess } from "../../support/sim-process.ts";
import { check, monoMs, type ControllerEntry, type DaemonLife, type DeviceEntry, type Verdict } from "./history.ts";

const A = "valve-1";
const CONTROLLER = resolve(import.meta.dirname, "controller.ts");

export interface ChaosOptions {
  readonly kills: number;
  readonly seed: number;
  readonly controllers?: number;
  /** The controllers' lease TTL. */
  readonly ttlMs?: number;
  /** How long each daemon life lasts before its SIGKILL, ms: uniform in [min, max]. */
  readonly lifeMs?: readonly [number, number];
  /** Fault counts; default proportional to kills (at least one of each). */
  readonly pauses?: number;
  readonly brokerRestarts?: number;
  readonly linkCuts?: number;
  readonly powerCycles?: number;
  readonly controllerRestarts?: number;
  /** Keep the working directory (logs, journal, state file) for inspection. */
  readonly keep?: boolean;
  readonly say?: (line: string) => void;
}

export interface ChaosCounts {
  kills: number;
  pauses: number;
  brokerRestarts: number;
  linkCuts: number;
  powerCycles: number;
  controllerRestarts: number;
  daemonLives: number;
  simLives: number;
}

export interface ChaosResult<Counts extends object = ChaosCounts> {
  readonly seed: number;
  readonly dir: string;
  readonly counts: Counts;
  readonly verdict: Verdict;
  readonly seconds: number;
}

/** One chaos controller process (test/system/chaos/controller.ts) and what it logs. */
export interface ChaosController {
  readonly child: ChildProcess;
  readonly exited: Promise<unknown>;
  paused: boolean;
  readonly log: string;
  stderr: string;
}

/** Starts controller `i` (holder ctl-i, log dir/controller-i.jsonl); again on the same log after a kill. */
export function spawnController(brokerUrl: string, dir: string, i: number, ttlMs: number): ChaosController {
  const log = join(dir, `controller-${i}.jsonl`);
  // The run kills, pauses and restarts its controllers itself, and stops them in its finally.
  const child = startProcess(
    null,
    process.execPath,
    ["--import", "tsx", CONTROLLER, "--url", brokerUrl, "--holder", `ctl-${i}`, "--actuator", A, "--ttl-ms", String(ttlMs), "--log", log],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const c: ChaosController = { child, exited: new Promise((r) => child.once("exit", r)), paused: false, log, stderr: "" };
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (c.stderr += s));
  return c;
}

/** Stops the controllers (SIGTERM: each releases its lease), SIGKILL after 5 s. */
export async function stopControllers(controllers: readonly ChaosController[]): Promise<void> {
  for (const c of controllers) {
    c.child.kill("SIGCONT");
    c.child.kill("SIGTERM");
  }
  await Promise.all(controllers.map((c) => Promise.race([c.exited, sleep(5000)])));
  for (const c of controllers) c.child.kill("SIGKILL");
}

/** Every controller's log entries, and what was wrong with them (unreadable lines, errors on stderr). */
export function controllerHistory(controllers: readonly ChaosController[]): { entries: ControllerEntry[]; problems: string[] } {
  const entries: ControllerEntry[] = [];
  const problems: string[] = [];
  for (const log of new Set(controllers.map((c) => c.log))) {
    if (!existsSync(log)) continue;
    for (const line of readFileSync(log, "utf8").split("\n")) {
      if (line.trim() === "") continue;
      try {
        entries.push(JSON.parse(line) as ControllerEntry);
      } catch {
        problems.push(`unreadable line in ${log}: ${line.slice(0, 100)}`);
      }
    }
  }
  for (const c of controllers) if (/Error|error/.test(c.stderr)) problems.push(`controller ${c.log} stderr: ${c.stderr.slice(-500)}`);
  return { entries, problems };
}

/** mulberry32: the schedule is a function of the seed. */
export function prng(seed: number): () => number {
  let state = seed | 0;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Fault = "pause" | "broker" | "link" | "power" | "restart";

function startSim(bin: string, serial: string, stateFile: string, control: string): Promise<SimProcess> {
  return startSimProcess(bin, ["--serial", serial, "--state", stateFile, "--control", control, "--rate", "0"]);
}

/**
 * One request on the simulator's control socket. A failure there ends the run; it says whether
 * the simulator process is still running and what it last wrote, so that the run's output
 * shows why (a "read ECONNRESET" alone means only that the simulator closed the connection
 * with the request unread, which a process exiting does).
 */
async function simControl(control: string, sim: SimProcess, cmd: ControlCommand): Promise<Record<string, unknown>> {
  try {
    return await sendControl(control, cmd);
  } catch (err) {
    const { exitCode, signalCode } = sim.child;
    const state = exitCode === null && signalCode === null ? "still runs" : `exited (${exitCode ?? signalCode})`;
    throw new Error(
      `simulator control request ${cmd.op} failed: ${(err as Error).message}; the simulator (pid ${sim.child.pid}) ${state}; its stderr: ${sim.stderr.slice(-1000) || "-"}`,
      { cause: err },
    );
  }
}

/** The device's applied log, moved onto CLOCK_MONOTONIC with the best of a few clock probes. */
async function readDevice(control: string, sim: SimProcess, simLife: number): Promise<DeviceEntry[]> {
  let best: { offset: number; err: number; applied: { token: number; seq: number; setpoints: { position: number }; at: number }[] } | null =
    null;
  for (let i = 0; i < 3; i++) {
    const t0 = monoMs();
    const answer = (await simControl(control, sim, { op: "device", unit: 1 })) as { now: number; device: { applied: never[] } };
    const t1 = monoMs();
    const err = (t1 - t0) / 2;
    if (!best || err < best.err) best = { offset: (t0 + t1) / 2 - answer.now, err, applied: answer.device.applied };
  }
  const b = best!;
  return b.applied.map((e) => ({
    token: e.token,
    seq: e.seq,
    position: e.setpoints.position,
    mono: e.at + b.offset,
    errMs: b.err,
    simLife,
  }));
}

export function daemonLife(d: DaemonProcess, startMono: number, killMono: number | null, gateway?: string): DaemonLife {
  const loadedLine = d.logs.find((l) => l.msg === "journal loaded" && l.actuator === A);
  const loaded = loadedLine
    ? { highestGranted: loadedLine.highestGranted as number, fence: loadedLine.fence as { token: number; seq: number | null } }
    : null;
  const granted = d.logs
    .filter((l: LogLine) => l.msg === "granted" && l.actuator === A)
    .map((l) => ({ holder: l.holder as string, token: l.token as number }));
  return { startMono, killMono, loaded, granted, ...(gateway !== undefined ? { gateway } : {}) };
}

export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const started = monoMs();
  const say = options.say ?? (() => {});
  const random = prng(options.seed);
  const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const nControllers = options.controllers ?? 3;
  const ttlMs = options.ttlMs ?? 2000;
  const [lifeMin, lifeMax] = options.lifeMs ?? [300, 2500];
  const kills = options.kills;

  // The schedule: which faults happen in which daemon life (0..kills-1), all from the seed.
  const plan: Fault[][] = Array.from({ length: kills }, () => []);
  const place = (fault: Fault, n: number) => {
    for (let i = 0; i < n; i++) plan[Math.floor(random() * kills)]!.push(fault);
  };
  place("pause", options.pauses ?? Math.max(1, Math.ceil(kills / 3)));
  place("broker", options.brokerRestarts ?? Math.max(1, Math.ceil(kills / 8)));
  place("link", options.linkCuts ?? Math.max(1, Math.ceil(kills / 8)));
  place("power", options.powerCycles ?? Math.max(1, Math.ceil(kills / 5)));
  place("restart", options.controllerRestarts ?? Math.max(1, Math.ceil(kills / 5)));

  const dir = mkdtempSync(join(tmpdir(), "fencegate-chaos-"));
  const ptyDir = join(dir, "pty");
  mkdirSync(ptyDir);
  const stateFile = join(dir, "eeprom.json");
  const control = join(dir, "control.sock");
  const counts: ChaosCounts = {
    kills: 0,
    pauses: 0,
    brokerRestarts: 0,
    linkCuts: 0,
    powerCycles: 0,
    controllerRestarts: 0,
    daemonLives: 0,
    simLives: 0,
  };
  const device: DeviceEntry[] = [];
  const lives: DaemonLife[] = [];
  const problems: string[] = [];

  let broker: Broker | null = null;
  let pty: PtyPair | null = null;
  let sim: SimProcess | null = null;
  let daemon: DaemonProcess | null = null;
  const controllers: ChaosController[] = [];
  const pauses: Promise<void>[] = [];

  const bundle = await bundleCli();
  const bin = bundle.bin;
  try {
    broker = await startMosquitto();
    pty = await createPtyPair({ dir: ptyDir });
    sim = await startSim(bin, pty.device, stateFile, control);
    counts.simLives++;
    const config = gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { line: { type: "rtu", path: pty.master, baudRate: 115_200, timeoutMs: 300, reconnect: { minMs: 50, maxMs: 500 } } },
      actuators: [valve(A, "line", 1)],
      mqtt: { reconnect: { minMs: 100, maxMs: 500 }, keepaliveS: 5 },
      leases: { minTtlMs: 100, maxTtlMs: 60_000, defaultTtlMs: ttlMs },
      commands: { defaultDeadlineMs: 1000, maxDeadlineMs: 10_000 },
    });
    config.logging = { level: "info" };

    const startDaemon = async (): Promise<{ d: DaemonProcess; startMono: number }> => {
      const startMono = monoMs();
      const d = DaemonProcess.start(dir, config, { bin });
      daemon = d;
      counts.daemonLives++;
      await d.ready([A], 30_000);
      const t0 = d.logs[0]?.time as number;
      say(
        `  daemon ready in ${Math.round(monoMs() - startMono)} ms: ${d.logs
          .slice(0, 12)
          .map((l) => `${l.msg}@${(l.time as number) - t0}`)
          .join(", ")}`,
      );
      return { d, startMono };
    };

    let life = await startDaemon();
    const startController = (i: number) => (controllers[i] = spawnController(broker!.url, dir, i, ttlMs));
    for (let i = 0; i < nControllers; i++) startController(i);

    /** The controller whose log says it holds the lease now, or -1. */
    const holderNow = (): number => {
      for (const [i, c] of controllers.entries()) {
        const lines = existsSync(c.log)
          ? readFileSync(c.log, "utf8")
              .trimEnd()
              .split("\n")
              .filter((l) => l !== "")
          : [];
        const last = lines
          .map((l) => JSON.parse(l) as ControllerEntry)
          .findLast((e) => e.ev === "granted" || e.ev === "lost" || e.ev === "start");
        if (last?.ev === "granted" && !c.paused) return i;
      }
      return -1;
    };

    const restartController = async () => {
      let holder = holderNow();
      for (let waited = 0; holder < 0 && waited < 3000; waited += 100) {
        await sleep(100); // the interesting restart is the lease holder's
        holder = holderNow();
      }
      const i = holder >= 0 ? holder : Math.floor(random() * nControllers);
      const c = controllers[i]!;
      if (c.paused) return;
      counts.controllerRestarts++;
      if (holder >= 0 && counts.controllerRestarts % 2 === 1) {
        // Within the library: a fresh client (fast enough to find its lease still live).
        c.child.kill("SIGUSR2");
        return;
      }
      c.child.kill("SIGKILL");
      await c.exited;
      if (/Error|error/.test(c.stderr)) problems.push(`controller ${c.log} stderr: ${c.stderr.slice(-500)}`);
      startController(i); // same holder, same log: its lease, if still live, comes back with its token
    };

    const pause = async () => {
      const free = controllers.filter((c) => !c.paused);
      if (free.length === 0) return;
      const c = free[Math.floor(random() * free.length)]!;
      const ms = between(Math.ceil(ttlMs * 1.5), ttlMs * 3);
      counts.pauses++;
      c.paused = true;
      c.child.kill("SIGSTOP");
      pauses.push(
        sleep(ms).then(() => {
          c.child.kill("SIGCONT");
          c.paused = false;
        }),
      );
    };

    const cutLink = async () => {
      counts.linkCuts++;
      await pty!.close(); // the cable is pulled
      await sleep(between(50, 400));
      // The simulator's applied log lives in its RAM: take it before the process goes.
      device.push(...(await readDevice(control, sim!, counts.simLives)));
      await stopProcess(sim!.child, 3000);
      rmSync(join(ptyDir, "device"), { force: true });
      rmSync(join(ptyDir, "master"), { force: true });
      pty = await createPtyPair({ dir: ptyDir });
      sim = await startSim(bin, pty.device, stateFile, control);
      counts.simLives++;
    };

    const fault = async (f: Fault) => {
      say(`  fault: ${f}`);
      switch (f) {
        case "pause":
          return pause();
        case "broker":
          counts.brokerRestarts++;
          await broker!.kill();
          await sleep(between(100, 1000));
          return broker!.start();
        case "link":
          return cutLink();
        case "power":
          counts.powerCycles++;
          await simControl(control, sim!, { op: "powerCycle" });
          return;
        case "restart":
          return restartController();
      }
    };

    for (let k = 0; k < kills; k++) {
      const lifeMs = between(lifeMin, lifeMax);
      const faults = plan[k]!;
      // Faults at random moments inside the life, then the kill at its end.
      const at = faults.map(() => between(0, lifeMs)).sort((a, b) => a - b);
      let t = 0;
      for (const [j, f] of faults.entries()) {
        await sleep(at[j]! - t);
        t = at[j]!;
        await fault(f);
      }
      await sleep(Math.max(0, lifeMs - t));
      const d = life.d;
      if (d.child.exitCode !== null || d.child.signalCode !== null)
        problems.push(
          `daemon life ${counts.daemonLives} exited by itself (${d.child.exitCode ?? d.child.signalCode}): ${d.stderr.slice(-500)}`,
        );
      const killMono = monoMs();
      await d.kill("SIGKILL");
      counts.kills++;
      lives.push(daemonLife(d, life.startMono, killMono));
      say(
        `kill ${counts.kills}/${kills} after ${lifeMs} ms (faults: ${faults.join(",") || "-"}); applied so far at this sim: ${device.length}+`,
      );
      await sleep(between(0, 200));
      life = await startDaemon();
    }

    // Let the last life serve a little (every pause over), then stop the load and judge.
    await Promise.all(pauses);
    await sleep(Math.max(1000, ttlMs * 2));
    say("  stopping the controllers, then reading the device's applied log");
    await stopControllers(controllers);
    lives.push(daemonLife(life.d, life.startMono, null));
    device.push(...(await readDevice(control, sim!, counts.simLives)));
  } finally {
    for (const c of controllers) {
      c.child.kill("SIGCONT");
      c.child.kill("SIGKILL");
    }
    await (daemon as DaemonProcess | null)?.kill("SIGKILL");
    if (sim) await stopProcess(sim.child, 3000);
    await pty?.close();
    await broker?.stop();
    bundle.remove();
  }

  const { entries, problems: controllerProblems } = controllerHistory(controllers);
  problems.push(...controllerProblems);
  const judged = check({ controllers: entries, device, daemon: lives });
  const verdict: Verdict = { ...judged, violations: [...problems, ...judged.violations] };
  if (!options.keep && verdict.violations.length === 0) rmSync(dir, { recursive: true, force: true });
  return { seed: options.seed, dir, counts, verdict, seconds: (monoMs() - started) / 1000 };
}

export function report(r: ChaosResult<object>): string {
  const v = r.verdict;
  const refused = Object.entries(v.refusedByCode)
    .sort((a, b) => b[1] - a[1])
    .map(([code, n]) => `${code}=${n}`)
    .join(" ");
  const counts = Object.entries(r.counts)
    .map(([name, n]) => `${name.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`)}=${String(n)}`)
    .join(" ");
  return [
    `chaos seed=${r.seed} in ${r.seconds.toFixed(1)} s`,
    `  ${counts}`,
    `  grants=${v.grants} applied at the device=${v.appliedAtDevice} "applied" replies=${v.appliedReplies}`,
    `  refused by code: ${refused || "-"}`,
    `  violations=${v.violations.length}`,
    ...v.violations.slice(0, 30).map((s) => `    ${s}`),
    ...(v.violations.length > 0 ? [`  kept: ${r.dir}`] : []),
  ].join("\n");
}
