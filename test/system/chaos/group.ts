/**
 * Chaos for a gateway group (`npm run chaos -- --group`): two gateway daemons on a 3-member
 * etcd, Mosquitto, the simulated fenced valve over Modbus TCP (each gateway through a link
 * of its own) and several controller processes under continuous load, while a seeded
 * schedule
 *
 *  - SIGKILLs a gateway (mostly the active one) and starts it again on its journal,
 *  - SIGSTOPs a gateway for half to two and a half etcd lease TTLs, then SIGCONTs it,
 *  - kills an etcd member and starts it again (never more than one down: the quorum stays),
 *  - cuts a gateway's link to the device for a while,
 *  - stalls a gateway's link (its frames held, then delivered late: a converter's buffer),
 *  - makes a zombie: stalls the active gateway's link with a write in it, pauses the gateway
 *    until the other one has taken over, then lets the stuck write through and wakes it.
 *
 * Afterwards the same checker as the single-gateway chaos (history.ts) judges the device's
 * own applied log, every controller's log and every gateway life's "granted" lines: no stale
 * write applied, no token granted twice (controllers' and gateways' own takeover tokens, across
 * both gateways), the device's history monotonic in (token, seq).
 */
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DaemonProcess } from "../../support/daemon.ts";
import { GATEWAYS, isServing, isSteppingDown, startGroup } from "../../support/group.ts";
import { Teardown } from "../../support/stack.ts";
import {
  controllerHistory,
  daemonLife,
  prng,
  spawnController,
  stopControllers,
  type ChaosController,
  type ChaosResult,
} from "./harness.ts";
import { check, monoMs, type DaemonLife, type DeviceEntry, type Verdict } from "./history.ts";

export interface GroupChaosOptions {
  readonly faults: number;
  readonly seed: number;
  readonly controllers?: number;
  /** The controllers' lease TTL. */
  readonly ttlMs?: number;
  /** The gateways' etcd lease TTL. */
  readonly leaseTtlMs?: number;
  readonly keep?: boolean;
  readonly say?: (line: string) => void;
}

export interface GroupChaosCounts {
  faults: number;
  kills: number;
  pauses: number;
  etcdRestarts: number;
  linkCuts: number;
  linkStalls: number;
  zombies: number;
  takeovers: number;
  stepDowns: number;
  gatewayLives: number;
  /** Writes the device itself refused (0x46): a deposed gateway's, arriving late. */
  deviceRefusals: number;
}

type Fault = "kill" | "pause" | "etcd" | "cut" | "stall" | "zombie";
/** Dealt in seeded shuffles of this deck, so every kind comes at least once in every few faults. */
const DECK: readonly Fault[] = ["kill", "pause", "kill", "pause", "etcd", "cut", "stall", "cut", "stall", "etcd", "zombie", "zombie"];

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Each gateway life's log beside the controllers' histories (gateway-<life>-<name>.jsonl),
 * each line stamped with `mono` from pino's wall-clock `time`: what a violation is traced with.
 */
function keepDaemonLogs(dir: string, lives: readonly Life[]): void {
  const wallMinusMono = Date.now() - monoMs();
  for (const [n, life] of lives.entries()) {
    const lines = life.d.logs.map((l) =>
      JSON.stringify(typeof l.time === "number" ? { mono: Number((l.time - wallMinusMono).toFixed(1)), ...l } : l),
    );
    writeFileSync(
      join(dir, `gateway-${n}-${GATEWAYS[life.gateway]}.jsonl`),
      [JSON.stringify({ startMono: life.startMono, killMono: life.killMono }), ...lines, ""].join("\n"),
    );
  }
}

interface Life {
  readonly gateway: number;
  readonly d: DaemonProcess;
  readonly startMono: number;
  killMono: number | null;
}

export async function runGroupChaos(options: GroupChaosOptions): Promise<ChaosResult<GroupChaosCounts>> {
  const started = monoMs();
  const dir = mkdtempSync(join(tmpdir(), "fencegate-group-chaos-"));
  // Every fault with its time goes to faults.log as well: a violation is read against them.
  const say = (line: string) => {
    appendFileSync(join(dir, "faults.log"), `${monoMs().toFixed(3)} ${line}\n`);
    options.say?.(line);
  };
  const random = prng(options.seed);
  const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const ttlMs = options.ttlMs ?? 2000;
  const leaseTtlMs = options.leaseTtlMs ?? 3000;
  const counts: GroupChaosCounts = {
    faults: 0,
    kills: 0,
    pauses: 0,
    etcdRestarts: 0,
    linkCuts: 0,
    linkStalls: 0,
    zombies: 0,
    takeovers: 0,
    stepDowns: 0,
    gatewayLives: 0,
    deviceRefusals: 0,
  };
  const teardown = new Teardown();
  const lives: Life[] = [];
  const controllers: ChaosController[] = [];
  const problems: string[] = [];
  const device: DeviceEntry[] = [];
  const busy = new Set<string>();
  const tasks: Promise<void>[] = [];

  try {
    // The members' election timeout fits the lease (src/config/schema.ts): an etcd member restart moves etcd's leader without a step-down.
    const group = await startGroup(teardown, {
      name: "chaos",
      etcd: { members: 3, electionTimeoutMs: 300 },
      leaseTtlMs,
      selfFenceMarginMs: 500,
      gateway: { logging: { level: "info" } },
    });
    const start = (i: number) => {
      lives.push({ gateway: i, d: group.start(i), startMono: monoMs(), killMono: null });
      counts.gatewayLives++;
    };
    const current = (i: number) => lives.findLast((l) => l.gateway === i)!;
    const activeNow = (): number => {
      for (let i = 0; i < GATEWAYS.length; i++) {
        const last = current(i).d.logs.findLast((l) => isServing(l) || isSteppingDown(l));
        if (last !== undefined && isServing(last) && current(i).killMono === null) return i;
      }
      return -1;
    };
    start(0);
    start(1);
    await group.waitActive(30_000);
    for (let i = 0; i < (options.controllers ?? 3); i++) controllers.push(spawnController(group.broker.url, dir, i, ttlMs));
    // The faults begin once the load has: a controller holds a lease and commands.
    const loadDeadline = performance.now() + 60_000;
    while (group.sim.device(1).applied.length < 10 && performance.now() < loadDeadline) await sleep(100);

    /** Runs `fault` on `target` unless something else is being done to it. */
    const run = (target: string, fault: () => Promise<void>): boolean => {
      if (busy.has(target)) return false;
      busy.add(target);
      tasks.push(
        fault()
          .catch((err: unknown) => {
            problems.push(`fault on ${target} failed: ${String(err)}`);
          })
          .finally(() => busy.delete(target)),
      );
      return true;
    };
    // Kills and pauses alternate, each starting with the active gateway (when there is one)
    // and then either; the link faults go to either.
    const hits = { kill: 0, pause: 0 };
    const gateway = (kind: Fault) => {
      const active = activeNow();
      const atActive = (kind === "kill" || kind === "pause") && hits[kind]++ % 2 === 0;
      const i = active >= 0 && atActive ? active : Math.floor(random() * GATEWAYS.length);
      // A gateway busy with another fault (a zombie takes seconds): the other one, if free.
      return busy.has(`gw${i}`) && !busy.has(`gw${1 - i}`) && !atActive ? 1 - i : i;
    };
    const attempt = (kind: Fault): boolean => {
      const i = gateway(kind);
      const name = GATEWAYS[i]!;
      switch (kind) {
        case "kill":
          return run(`gw${i}`, async () => {
            counts.kills++;
            const life = current(i);
            say(`  fault: kill ${name}${activeNow() === i ? " (active)" : ""}`);
            life.killMono = monoMs();
            life.d.child.kill("SIGCONT");
            await life.d.kill("SIGKILL");
            await sleep(between(100, 800));
            start(i);
            // Not faulted again before its start is on record: the log is written in batches, and
            // a kill before the "journal loaded" line is out would leave the checker without it.
            await current(i).d.waitForLog(
              (l) => l.msg === "group member started; standing by until this gateway holds the group's leader key",
              30_000,
              "the gateway started",
            );
          });
        case "pause":
          return run(`gw${i}`, async () => {
            counts.pauses++;
            const ms = between(Math.ceil(leaseTtlMs / 2), Math.ceil(leaseTtlMs * 2.5));
            say(`  fault: pause ${name}${activeNow() === i ? " (active)" : ""} for ${ms} ms`);
            current(i).d.child.kill("SIGSTOP");
            await sleep(ms);
            current(i).d.child.kill("SIGCONT");
          });
        case "etcd": {
          const member = Math.floor(random() * group.etcd.members.length);
          return run("etcd", async () => {
            counts.etcdRestarts++;
            say(`  fault: etcd member ${member + 1} restarted`);
            await group.etcd.kill(member);
            await sleep(between(300, 2000));
            await group.etcd.restart(member);
          });
        }
        case "cut":
          return run(`link${i}`, async () => {
            counts.linkCuts++;
            const ms = between(200, 2000);
            say(`  fault: ${name}'s device link cut for ${ms} ms`);
            group.links[i]!.cut();
            await sleep(ms);
            group.links[i]!.restore();
          });
        case "stall":
          return run(`link${i}`, async () => {
            counts.linkStalls++;
            const ms = between(200, 2500);
            say(`  fault: ${name}'s device link stalled for ${ms} ms`);
            group.links[i]!.hold();
            await sleep(ms);
            group.links[i]!.release();
          });
        case "zombie": {
          const active = activeNow();
          if (active < 0) return false;
          const other = 1 - active;
          return run(`gw${active}`, async () => {
            counts.zombies++;
            const link = group.links[active]!;
            const d = current(active).d;
            say(`  fault: zombie ${GATEWAYS[active]} (active): a write stuck in its link, paused until ${GATEWAYS[other]} takes over`);
            link.hold();
            // Until a command is stuck in it (polls and keep-alives go first; each held one times out).
            for (let waited = 0; link.heldWrites === 0 && waited < 4000; waited += 20) await sleep(20);
            d.child.kill("SIGSTOP");
            const taken = current(other).d;
            const seen = taken.logs.filter(isServing).length;
            await taken
              .waitForLog(
                (l) => isServing(l) && taken.logs.filter(isServing).length > seen,
                leaseTtlMs + 10_000,
                "the other gateway taking over",
              )
              .catch(() => undefined);
            const before = group.sim.device(1).refusalCount;
            const writes = link.heldWrites;
            link.release();
            await sleep(between(100, 1000));
            say(`    zombie: ${writes} write(s) stuck and let through; device refusals ${before} -> ${group.sim.device(1).refusalCount}`);
            d.child.kill("SIGCONT");
          });
        }
      }
    };
    let hand: Fault[] = [];
    const pick = (): Fault => {
      if (hand.length === 0) {
        hand = [...DECK];
        for (let k = hand.length - 1; k > 0; k--) {
          const j = Math.floor(random() * (k + 1));
          [hand[k], hand[j]] = [hand[j]!, hand[k]!];
        }
      }
      return hand.pop()!;
    };

    while (counts.faults < options.faults) {
      await sleep(between(300, 1500));
      // A fault whose target is busy goes back into the hand for later: every fault counted was done.
      const skipped: Fault[] = [];
      for (let tries = 0; tries < 10; tries++) {
        const kind = pick();
        if (attempt(kind)) {
          counts.faults++;
          break;
        }
        if (kind === "kill" || kind === "pause") hits[kind]--; // its turn at the active one is not used up
        skipped.push(kind);
      }
      hand.push(...skipped);
    }
    await Promise.all(tasks);
    for (let i = 0; i < GATEWAYS.length; i++) current(i).d.child.kill("SIGCONT");
    // Let the group settle and serve a little, then stop the load and judge.
    const deadline = performance.now() + 30_000;
    while (activeNow() < 0 && performance.now() < deadline) await sleep(100);
    if (activeNow() < 0) problems.push("no gateway active 30 s after the last fault");
    await sleep(Math.max(2000, ttlMs * 2));
    await stopControllers(controllers);

    // The in-process simulator's clock is this process's performance.now().
    const offset = monoMs() - performance.now();
    counts.deviceRefusals = group.sim.device(1).refusalCount;
    device.push(
      ...group.sim.device(1).applied.map((e) => ({
        token: e.token ?? 0,
        seq: e.seq ?? 0,
        position: e.setpoints.position,
        mono: e.at + offset,
        errMs: 0.5,
        simLife: 1,
      })),
    );
    for (const life of lives) {
      const { exitCode, signalCode } = life.d.child;
      if (life.killMono === null && (exitCode !== null || signalCode !== null))
        problems.push(`${GATEWAYS[life.gateway]} exited by itself (${exitCode ?? signalCode}): ${life.d.stderr.slice(-500)}`);
      counts.takeovers += life.d.logs.filter(isServing).length;
      counts.stepDowns += life.d.logs.filter(isSteppingDown).length;
    }
  } finally {
    for (const c of controllers) {
      c.child.kill("SIGCONT");
      c.child.kill("SIGKILL");
    }
    await teardown.run().catch((err: unknown) => problems.push(`teardown: ${String(err)}`));
  }

  const { entries, problems: controllerProblems } = controllerHistory(controllers);
  const daemonLives: DaemonLife[] = lives.map((l) => daemonLife(l.d, l.startMono, l.killMono, GATEWAYS[l.gateway]));
  const judged = check({ controllers: entries, device, daemon: daemonLives });
  const verdict: Verdict = { ...judged, violations: [...problems, ...controllerProblems, ...judged.violations] };
  if (!options.keep && verdict.violations.length === 0) rmSync(dir, { recursive: true, force: true });
  else keepDaemonLogs(dir, lives);
  return { seed: options.seed, dir, counts, verdict, seconds: (monoMs() - started) / 1000 };
}
