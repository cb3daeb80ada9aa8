/**
 * One seeded run: the real core and the real shell (the Gateway class, unmodified), with
 * every port simulated: clock and scheduler, the journal, the devices, the broker. The seed
 * decides the fault profile (which kinds of fault are on, and how often: swarm testing)
 * and every draw after it. The run has a faulty phase, then a quiet tail in which all
 * faults stop, for liveness. A gateway crash drops the Gateway instance and everything it
 * had in flight and starts a new one over the journal's synced content, as a daemon
 * restart does.
 */
import pino from "pino";
import { step as realStep } from "../core/actuator.ts";
import { stepViolations } from "../core/invariants.ts";
import type { ActuatorConfig } from "../core/types.ts";
import { Gateway, type ActuatorBinding } from "../shell/gateway.ts";
import type { GatewayRequest } from "../../packages/protocol/src/index.ts";
import { DEFAULT_AUDIT_BOUNDS, type AuditBounds } from "../shell/group-commit.ts";
import type { Outbox, Random } from "../shell/ports.ts";
import { Checker } from "./checker.ts";
import { Controller, type ControllerEnv } from "./controller.ts";
import { SimActuator, SimDevicePort, type LineFaults } from "./device.ts";
import { SimJournal, type CommitCrash, type JournalHooks } from "./journal.ts";
import { Network, type NetFaults } from "./network.ts";
import { Prng } from "./prng.ts";
import { World } from "./world.ts";

export interface SimOptions {
  readonly faultyMs?: number;
  readonly tailMs?: number;
  /** After the tail: every controller stops dead (its leases run out), for the safe-write check. */
  readonly haltMs?: number;
  readonly controllers?: number;
  /** Replaces the core's step (the checker's own tests inject a broken rule). */
  readonly step?: typeof realStep;
  /** Judge every step by the core's invariants too (default on; the checker's own tests turn it off to see the checker alone). */
  readonly invariants?: boolean;
  /** Receives every line of the history, to read a failing seed's story. */
  readonly trace?: (line: string) => void;
}

export interface SimResult {
  readonly seed: number;
  readonly violations: readonly string[];
  readonly faults: ReadonlyMap<string, number>;
  readonly accepted: number;
  readonly safeWrites: number;
  readonly applied: number;
  readonly grants: number;
  readonly refused: ReadonlyMap<string, number>;
  readonly crashes: number;
  readonly events: number;
  readonly hash: string;
}

/** Per seed: which faults are on and how hard (half the kinds are off in a typical seed). */
interface FaultProfile {
  readonly net: NetFaults;
  readonly line: LineFaults;
  /** Per chaos tick (every 50 ms of the faulty phase). */
  readonly pPartition: number;
  readonly pPause: number;
  readonly pPowerCycle: number;
  readonly pBusDown: number;
  readonly pCrash: number;
  readonly pCleanRestart: number;
  /** Per journal commit / per device action. */
  readonly pCrashBeforeSync: number;
  readonly pCrashAfterSync: number;
  readonly pCrashAfterIntent: number;
  readonly pCrashAfterAct: number;
  /** Per device write: the process dies as the write leaves, before its audit record is committed. */
  readonly pCrashAfterWrite: number;
  /** Per commit the audit lag forces (only audit records, the oldest at `lagMs` or `lagRecords` waiting): dies before its sync. */
  readonly pCrashAtAuditLag: number;
  /** The audit writer's bounds, drawn so that both the time and the record bound are reached. */
  readonly audit: AuditBounds;
  readonly maxCrashes: number;
}

function drawProfile(rng: Prng): FaultProfile {
  const some = (max: number) => (rng.chance(0.5) ? rng.float() * max : 0);
  return {
    net: { delayMaxMs: rng.int(1, 30), pDrop: some(0.2), pDuplicate: some(0.2) },
    line: { latencyMaxMs: rng.int(1, 30), pLostAnswer: some(0.15), pCrc: some(0.1), pPowerLoss: some(0.1) },
    pPartition: some(0.05),
    pPause: some(0.05),
    pPowerCycle: some(0.03),
    pBusDown: some(0.02),
    pCrash: some(0.02),
    pCleanRestart: some(0.01),
    pCrashBeforeSync: some(0.03),
    pCrashAfterSync: some(0.03),
    pCrashAfterIntent: some(0.1),
    pCrashAfterAct: some(0.1),
    pCrashAfterWrite: some(0.1),
    pCrashAtAuditLag: some(0.3),
    audit: { ...DEFAULT_AUDIT_BOUNDS, lagMs: rng.int(1, 300), lagRecords: rng.int(1, 64) },
    maxCrashes: rng.int(1, 6),
  };
}

const ACTUATORS = [
  { id: "valve-a", profile: "fenced" as const },
  { id: "valve-b", profile: "plain" as const },
];
const MIN_TTL_MS = 100;
const MAX_TTL_MS = 600;
const CHAOS_TICK_MS = 50;
/** Mixed into the seed for the secrets' stream (any constant: it only has to differ from root's). */
const SECRETS_STREAM = 0x5ec2e75;
/** A run that goes wrong must still end: far above what a healthy run needs. */
const MAX_EVENTS = 200_000;

const silentLog = pino({ level: "silent" });

interface Process {
  readonly epoch: number;
  alive: boolean;
  /** Draining for a clean restart. */
  stopping: boolean;
  journal: SimJournal;
  gateway: Gateway;
  readonly refs: Map<number, { controller: Controller; id: string; actuator: string; request: GatewayRequest }>;
}

export async function runSeed(seed: number, options: SimOptions = {}): Promise<SimResult> {
  const faultyMs = options.faultyMs ?? 3_000;
  const tailMs = options.tailMs ?? 3_000;
  const haltMs = options.haltMs ?? 1_500;
  const root = new Prng(seed);
  const profile = drawProfile(root);
  const rngChaos = root.fork();
  const rngNet = root.fork();
  const rngLine = root.fork();
  const rngGateway = root.fork();
  // Seeded apart from root, so drawing here shifts no other component's draws: which actuators
  // take signed requests only (authenticatedCommands), and their lease secrets.
  const rngSecrets = new Prng(seed ^ SECRETS_STREAM);
  const authenticated = new Set(ACTUATORS.filter(() => rngSecrets.chance(0.5)).map((a) => a.id));
  const random: Random = { bytes: (n) => Uint8Array.from({ length: n }, () => rngSecrets.int(0, 255)) };
  const world = new World(MAX_EVENTS);
  const checker = new Checker(
    () => world.nowMs,
    ACTUATORS.map((a) => a.id),
    profile.audit.lagMs,
    20,
    options.trace ?? null,
  );
  const faults = new Map<string, number>();
  const fault = (kind: string) => {
    faults.set(kind, (faults.get(kind) ?? 0) + 1);
    checker.note(`fault ${kind}`);
  };
  let tail = false;
  const faulty = () => !tail;
  let crashes = 0;
  let commitCrashKind = "";
  const canCrash = () => faulty() && crashes < profile.maxCrashes;

  const configs = new Map<string, ActuatorConfig>(
    ACTUATORS.map((a) => [
      a.id,
      {
        points: { position: { writable: true, min: 0, max: 100 } },
        expiryPolicy: rngGateway.chance(0.5) ? { kind: "safe", set: { position: 0 } } : { kind: "hold" },
        limits: {
          minTtlMs: MIN_TTL_MS,
          maxTtlMs: MAX_TTL_MS,
          queueLimit: rngGateway.int(1, 4),
          recentLimit: 16,
          safeRetryMinMs: 20,
          safeRetryMaxMs: 300,
        },
      },
    ]),
  );
  // Each step judged as it is taken, beside the checker's judgement of what the world saw.
  const actuatorOf = new Map([...configs].map(([id, config]) => [config, id]));
  const coreStep = options.step ?? realStep;
  const judgedStep: typeof realStep = (config, state, input) => {
    const result = coreStep(config, state, input);
    if (options.invariants !== false) {
      const broken = stepViolations(config, state, input, result);
      if (broken.length > 0) checker.onInvariantBroken(actuatorOf.get(config) ?? "?", input.type, broken);
    }
    return result;
  };
  for (const [id, c] of configs) if (c.expiryPolicy.kind === "safe") checker.expectSafeValues(id);
  const defaultDeadlineMs = rngGateway.int(50, 500);
  const units = ACTUATORS.map((a, i) => new SimActuator(a.id, a.profile, world, i + 1));
  for (const unit of units) unit.onApplied = (token, seq) => checker.onDeviceApplied(unit.id, token, seq);

  const network = new Network(world, rngNet, profile.net, faulty, fault);
  let current: Process | null = null;

  // ---------------------------------------------------------------------------------------
  // gateway processes

  const crash = (p: Process, kind: string) => {
    if (!p.alive) return;
    crashes++;
    fault(`gateway.crash.${kind}`);
    end(p);
  };

  /** A clean restart, as the daemon stops: drain (bounded), close the journal, exit. */
  const cleanRestart = (p: Process) => {
    p.stopping = true;
    fault("gateway.cleanRestart");
    void p.gateway.drain(rngGateway.int(20, 400)).then(() => {
      if (!p.alive) return; // it crashed while draining
      p.journal.close();
      end(p);
    });
  };

  const end = (p: Process) => {
    p.alive = false;
    checker.onCrash(p.epoch);
    // No restart is quicker than a frame takes on the line: a request the dead process put on
    // the wire has reached its device (or been lost) before the new process sends anything.
    const minRestartMs = 2 * profile.line.latencyMaxMs + 10;
    world.after(rngGateway.int(minRestartMs, minRestartMs + 200), () => startProcess(p.journal.reopen(), p.epoch + 1));
  };

  // Only the running process commits (a dead one's group-commit flush never runs).
  const journalHooks: JournalHooks = {
    crashAt: (entries): CommitCrash => {
      if (!canCrash()) return null;
      const has = (type: string) => entries.some((e) => e.record.type === type);
      // Only audit records, from a process not draining: the lag (its time or its record
      // count) forced this commit, so the writer holds the most it may; all of it is lost.
      const auditOnly = entries.every((e) => e.record.type === "intent" || e.record.type === "outcome");
      if (auditOnly && current?.stopping === false && rngGateway.chance(profile.pCrashAtAuditLag)) {
        commitCrashKind = "atAuditLagBound";
        return "beforeSync";
      }
      if (has("intent") && rngGateway.chance(profile.pCrashAfterIntent)) {
        commitCrashKind = "afterIntentSynced";
        return "afterSync";
      }
      const what = has("outcome") ? "Outcome" : has("granted") ? "Grant" : "Commit";
      if (rngGateway.chance(profile.pCrashBeforeSync)) {
        commitCrashKind = `before${what}Synced`;
        return "beforeSync";
      }
      if (rngGateway.chance(profile.pCrashAfterSync)) {
        commitCrashKind = `after${what}Synced`;
        return "afterSync";
      }
      return null;
    },
    onDurable: (entries) => checker.onDurable(entries),
    crash: () => {
      if (current !== null) crash(current, commitCrashKind);
    },
  };

  const startProcess = (journal: SimJournal, epoch: number) => {
    const snapshots = journal.load();
    // The process being built; its ports may only act while it lives.
    const self: { p: Process | null } = { p: null };
    const alive = () => self.p?.alive === true;
    const outbox: Outbox = {
      reply: (ref, reply) => {
        const p = self.p;
        if (!p?.alive) return;
        const to = p.refs.get(ref);
        if (!to) return;
        p.refs.delete(ref);
        checker.onReply(p.epoch, to.actuator, to.request, reply);
        network.send(to.controller.link, () => to.controller.receive(to.id, reply));
      },
      event: (actuator, event) => {
        if (!alive()) return;
        checker.note(`event ${actuator} ${event.type} ${event.holder ?? ""} ${event.token ?? ""} ${event.seq ?? ""} ${event.code ?? ""}`);
        if (event.type === "expired" && event.code === "STALE_TOKEN" && event.token !== undefined)
          checker.onLeaseRevoked(actuator, event.token);
      },
      state: () => {},
    };
    const bindings: ActuatorBinding[] = units.map((unit) => {
      const port = new SimDevicePort(
        unit,
        world,
        rngLine,
        () => (faulty() ? profile.line : { ...profile.line, pLostAnswer: 0, pCrc: 0, pPowerLoss: 0 }),
        {
          alive,
          beforeWrite: (cmd) => {
            if (!alive()) return;
            checker.onDeviceWrite(unit.id, cmd.holder, cmd.token, cmd.seq);
            // The frame still reaches the device (the port sends it regardless); its audit record, queued, is lost.
            if (canCrash() && rngGateway.chance(profile.pCrashAfterWrite)) crash(self.p!, "afterWriteBeforeAudit");
          },
          onUnit: (online) => {
            if (alive()) self.p!.gateway.linkChanged(unit.id, online);
          },
          afterAct: () => {
            if (alive() && canCrash() && rngGateway.chance(profile.pCrashAfterAct)) crash(self.p!, "afterDeviceActed");
          },
          fault,
        },
      );
      return {
        id: unit.id,
        config: configs.get(unit.id)!,
        device: port,
        fenced: unit.profile === "fenced",
        pollIntervalMs: 200,
        defaultDeadlineMs,
        authenticated: authenticated.has(unit.id),
      };
    });
    const gateway = new Gateway(
      {
        gatewayId: "sim",
        journal,
        clock: world.clock,
        scheduler: world.schedulerFor(alive),
        random,
        outbox,
        log: silentLog,
        actuators: bindings,
        onFatal: (err) => {
          if (alive()) checker.note(`fatal ${String(err)}`);
        },
        audit: profile.audit,
        step: judgedStep,
      },
      snapshots,
    );
    const p: Process = { epoch, alive: true, stopping: false, journal, gateway, refs: new Map() };
    self.p = p;
    current = p;
    checker.note(`start ${epoch}`);
    gateway.start();
  };

  startProcess(SimJournal.open(16, journalHooks), 1);

  // ---------------------------------------------------------------------------------------
  // controllers

  const env: ControllerEnv = {
    world,
    actuators: ACTUATORS.map((a) => a.id),
    minTtlMs: MIN_TTL_MS,
    maxTtlMs: MAX_TTL_MS,
    defaultDeadlineMs,
    send: (from, id, actuator, request) =>
      network.send(from.link, () => {
        const p = current;
        if (!p?.alive) return; // the broker has nobody to hand it to
        const ref = p.gateway.allocateRef();
        p.refs.set(ref, { controller: from, id, actuator, request });
        checker.note(`submit ${p.epoch} ${from.holder} ${id} ${actuator} ${JSON.stringify(request)}`);
        p.gateway.submit(actuator, ref, request);
      }),
    inTail: () => tail,
    onGranted: (actuator, holder, token) => checker.onControllerGranted(actuator, holder, token),
    onApplied: (actuator, holder, token, sentAtMs) => checker.onControllerApplied(actuator, holder, token, sentAtMs),
  };
  const controllers = Array.from({ length: options.controllers ?? 3 }, (_, i) => new Controller(`ctl-${i}`, i, env, root.fork()));
  for (const c of controllers) c.start();

  // ---------------------------------------------------------------------------------------
  // chaos, then quiet

  const chaos = () => {
    if (!faulty()) return;
    if (rngChaos.chance(profile.pPartition)) {
      const c = rngChaos.pick(controllers);
      c.link.partitionedUntilMs = world.nowMs + rngChaos.int(50, 1_500);
      fault("net.partition");
    }
    if (rngChaos.chance(profile.pPause)) {
      rngChaos.pick(controllers).pause(rngChaos.int(50, 1_500));
      fault("controller.pause");
    }
    if (rngChaos.chance(profile.pPowerCycle)) {
      const unit = rngChaos.pick(units);
      if (!unit.poweredOff) {
        unit.powerCycle(rngChaos.int(10, 400));
        fault("device.powerCycle");
      }
    }
    if (rngChaos.chance(profile.pBusDown)) {
      const unit = rngChaos.pick(units);
      if (!unit.busDown) {
        unit.busDown = true;
        fault("line.down");
        world.after(rngChaos.int(20, 500), () => (unit.busDown = false));
      }
    }
    if (current !== null && canCrash() && rngChaos.chance(profile.pCrash)) crash(current, "anytime");
    if (current?.alive && !current.stopping && canCrash() && rngChaos.chance(profile.pCleanRestart)) {
      crashes++; // counts against the same bound: a run must leave time for work between restarts
      cleanRestart(current);
    }
    world.after(CHAOS_TICK_MS, chaos);
  };
  world.after(CHAOS_TICK_MS, chaos);
  world.at(faultyMs, () => {
    tail = true;
    for (const c of controllers) c.link.partitionedUntilMs = 0;
    for (const unit of units) unit.busDown = false;
    checker.startTail();
  });

  // The halt: every controller stops dead, leaving its leases to run out, and in half the
  // seeds the gateway dies right then too, so those leases end by its restart instead; in
  // half, a device is unreachable for a while, so a lease may run out while it is.
  world.at(faultyMs + tailMs, () => {
    for (const c of controllers) c.halt();
    checker.startHalt();
    if (current?.alive && rngChaos.chance(0.5)) crash(current, "atHalt");
    if (rngChaos.chance(0.5)) {
      const unit = rngChaos.pick(units);
      unit.busDown = true;
      fault("line.downAtHalt");
      world.after(rngChaos.int(100, 700), () => (unit.busDown = false));
    }
  });

  await world.run(faultyMs + tailMs + haltMs);

  for (const unit of units) if (unit.profile === "fenced") checker.checkDeviceLog(unit.id, unit.device.applied);
  checker.finish();
  return {
    seed,
    violations: checker.violations,
    faults,
    accepted: checker.counts.accepted,
    safeWrites: checker.counts.safeWrites,
    applied: checker.counts.applied,
    grants: checker.counts.grants,
    refused: checker.counts.refused,
    crashes,
    events: world.eventsRun,
    hash: checker.digest(),
  };
}
