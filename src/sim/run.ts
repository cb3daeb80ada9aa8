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
import { EtcdGroupMember } from "../adapters/etcd/member.ts";
import { step as realStep } from "../core/actuator.ts";
import { stepViolations } from "../core/invariants.ts";
import { leadershipConfig } from "../core/leadership.ts";
import type { ActuatorConfig } from "../core/types.ts";
import { groupPort, groupRole } from "../daemon/group.ts";
import type { ActuatorBinding } from "../shell/actuator-runtime.ts";
import { Gateway } from "../shell/gateway.ts";
import type { GatewayRequest } from "../../packages/protocol/src/index.ts";
import { DEFAULT_AUDIT_BOUNDS, type AuditBounds } from "../shell/group-commit.ts";
import type { Outbox, Random } from "../shell/ports.ts";
import { Checker } from "./checker.ts";
import { Controller, type ControllerEnv } from "./controller.ts";
import { SimActuator, SimDevicePort, type LineFaults } from "./device.ts";
import { SimEtcd, SimEtcdClient, type EtcdFaults, type ProcessGate } from "./group.ts";
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
  /** Run this seed as a gateway group, or alone, whatever the seed draws (the group's own tests). */
  readonly group?: boolean;
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
  /** Two gateways in a gateway group, not one alone. */
  readonly group: boolean;
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

/** A fault kind's rate: off in half the seeds, else up to `max` (swarm testing). */
function sometimes(rng: Prng, max: number): number {
  return rng.chance(0.5) ? rng.float() * max : 0;
}

function drawProfile(rng: Prng): FaultProfile {
  const some = (max: number) => sometimes(rng, max);
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
/** Mixed into the seed for the gateway group's stream: whether the seed runs a group, and its faults. */
const GROUP_STREAM = 0x6209b;
/** The share of seeds that run a gateway group. */
const GROUP_SEEDS = 0.25;
/**
 * The group's etcd lease: 1 s (the configuration asks for 2 s at least) so that failovers fit
 * the 3 s faulty phase; the margin is above a frame's time on the line (at most 2 x 30 ms).
 */
const GROUP_TTL_MS = 1_000;
const GROUP_MARGIN_MS = 250;
const ETCD_REQUEST_TIMEOUT_MS = 200;
const GROUP_NAME = "sim";
/** Where the group keeps each actuator's highest token (src/adapters/etcd/member.ts). */
const TOKEN_PREFIX = `/fencegate/${GROUP_NAME}/token/`;
/** A run that goes wrong must still end: far above what a healthy run needs. */
const MAX_EVENTS = 200_000;

const silentLog = pino({ level: "silent" });

/** Per seed, the gateway group's faults (each on or off, at a per-seed rate). */
interface GroupProfile {
  readonly etcd: EtcdFaults;
  /** Per chaos tick: the active gateway paused (SIGSTOP, a long GC), cut off from etcd, killed. */
  readonly pPauseActive: number;
  readonly pCutOff: number;
  readonly pCrashActive: number;
}

function drawGroupProfile(rng: Prng): GroupProfile {
  return {
    etcd: { latencyMaxMs: rng.int(1, 40), pLostRequest: sometimes(rng, 0.1), pLostAnswer: sometimes(rng, 0.1) },
    pPauseActive: sometimes(rng, 0.04),
    pCutOff: sometimes(rng, 0.03),
    pCrashActive: sometimes(rng, 0.02),
  };
}

/** One gateway: its journal outlives its processes. Alone there is one; a group has two. */
interface Slot {
  /** Its gatewayId, and its name in the group and the checker's history ("sim" alone). */
  readonly name: string;
  journal: SimJournal;
  /** Its newest process, alive or not. */
  current: Process | null;
}

interface Process {
  readonly epoch: number;
  readonly slot: Slot;
  alive: boolean;
  /** Draining for a clean restart. */
  stopping: boolean;
  /** Paused until then: its timers and what reaches it wait. */
  pausedUntilMs: number;
  journal: SimJournal;
  gateway: Gateway;
  /** In a gateway group: its membership, its etcd client, and whether it takes requests (subscribed). */
  member: EtcdGroupMember | null;
  etcd: SimEtcdClient | null;
  role: "active" | "standby";
  readonly refs: Map<number, { controller: Controller; id: string; actuator: string; request: GatewayRequest }>;
}

export async function runSeed(seed: number, options: SimOptions = {}): Promise<SimResult> {
  const faultyMs = options.faultyMs ?? 3_000;
  const tailMs = options.tailMs ?? 3_000;
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
  // Seeded apart too: whether this seed runs a gateway group, and everything of the group's.
  const rngGroup = new Prng(seed ^ GROUP_STREAM);
  const group = options.group ?? rngGroup.chance(GROUP_SEEDS);
  const groupProfile = drawGroupProfile(rngGroup);
  const rngEtcd = rngGroup.fork();
  const rngGroupChaos = rngGroup.fork();
  // A group's takeover after the halt's kill waits out the dead gateway's etcd lease first.
  const haltMs = options.haltMs ?? (group ? 3_000 : 1_500);
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
  const etcd = new SimEtcd(world, (by, key, value) => {
    const actuator = key.startsWith(TOKEN_PREFIX) ? key.slice(TOKEN_PREFIX.length) : null;
    if (actuator !== null) checker.onGroupCommitted(actuator, by, Number(value));
  });
  const leadership = leadershipConfig(GROUP_TTL_MS, GROUP_MARGIN_MS);
  const leaderIs = (member: EtcdGroupMember) => etcd.peek(member.leaderKey)?.value === member.identity;
  let nextEpoch = 1;

  // ---------------------------------------------------------------------------------------
  // gateway processes

  const crash = (p: Process, kind: string) => {
    if (!p.alive) return;
    crashes++;
    fault(`gateway.crash.${kind}`);
    end(p);
  };

  /** A clean restart, as the daemon stops: drain (bounded), in a group step down, close the journal, exit. */
  const cleanRestart = (p: Process) => {
    p.stopping = true;
    fault("gateway.cleanRestart");
    void p.gateway.drain(rngGateway.int(20, 400)).then(async () => {
      if (!p.alive) return; // it crashed while draining
      if (p.member !== null) await p.member.stop();
      if (!p.alive) return;
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
    world.after(rngGateway.int(minRestartMs, minRestartMs + 200), () => startProcess(p.slot, p.journal.reopen()));
  };

  /** A paused process: nothing of it runs until it resumes, its timers first, then what reached it meanwhile. */
  const gateOf = (self: { p: Process | null }): ProcessGate => {
    const timer = (fn: () => void) => {
      const p = self.p;
      if (!p?.alive) return;
      if (world.nowMs < p.pausedUntilMs) world.at(p.pausedUntilMs, () => timer(fn));
      else fn();
    };
    const io = (fn: () => void) => {
      const p = self.p;
      if (!p?.alive) return;
      if (world.nowMs < p.pausedUntilMs) world.at(p.pausedUntilMs, () => world.after(0, () => io(fn)));
      else fn();
    };
    return { timer, io };
  };

  // Only a slot's running process commits (a dead one's group-commit flush never runs).
  const journalHooks = (slot: Slot): JournalHooks => ({
    crashAt: (entries): CommitCrash => {
      if (!canCrash()) return null;
      const has = (type: string) => entries.some((e) => e.record.type === type);
      // Only audit records, from a process not draining: the lag (its time or its record
      // count) forced this commit, so the writer holds the most it may; all of it is lost.
      const auditOnly = entries.every((e) => e.record.type === "intent" || e.record.type === "outcome");
      if (auditOnly && slot.current?.stopping === false && rngGateway.chance(profile.pCrashAtAuditLag)) {
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
    onDurable: (entries) => checker.onDurable(entries, group ? slot.name : ""),
    crash: () => {
      if (slot.current !== null) crash(slot.current, commitCrashKind);
    },
  });

  /** A gateway group's member for the process being built: the real EtcdGroupMember, on the simulated etcd. */
  const joinGroup = (self: { p: Process | null }, gateway: Gateway, ports: readonly SimDevicePort[], gate: ProcessGate) => {
    const scheduler = world.schedulerFor(gate.timer);
    const client = new SimEtcdClient(
      self.p!.slot.name,
      etcd,
      world,
      rngEtcd,
      () => (faulty() ? groupProfile.etcd : { ...groupProfile.etcd, pLostRequest: 0, pLostAnswer: 0 }),
      gate,
      ETCD_REQUEST_TIMEOUT_MS,
      fault,
    );
    const member: EtcdGroupMember = new EtcdGroupMember({
      client,
      group: GROUP_NAME,
      gatewayId: self.p!.slot.name,
      config: leadership,
      clock: world.clock,
      scheduler,
      log: silentLog,
      ...groupRole({
        gateway,
        openBuses: () => {
          for (const port of ports) port.setOpen(true);
          // The daemon's buses, once up, poll their units at once (daemon/buses.ts, wireBuses).
          for (const port of ports) gateway.pollNow(port.unit.id);
          return Promise.resolve();
        },
        closeBuses: () => {
          for (const port of ports) port.setOpen(false);
        },
        link: {
          setRole: (role) => {
            const p = self.p!;
            p.role = role;
            checker.note(`role ${p.epoch} ${role}`);
          },
          state: () => {},
        },
        active: () => member.phase === "active",
        clock: world.clock,
        log: silentLog,
      }),
    });
    return { member, client };
  };

  /** What the process being built says: replies to the controllers, events to the checker (nothing is published). */
  const outboxFor = (self: { p: Process | null }, epoch: number): Outbox => {
    const alive = () => self.p?.alive === true;
    return {
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
        // In a group a takeover and a stand-down end leases too (STALE_TOKEN, DEVICE_UNAVAILABLE).
        if (event.type === "expired" && (event.code === "STALE_TOKEN" || group) && event.token !== undefined)
          checker.onLeaseRevoked(actuator, event.token, epoch);
      },
      state: () => {},
    };
  };

  /** The process's ports onto the devices: its line, its crash points, and in a group the member's permit. */
  const portsFor = (self: { p: Process | null }, slot: Slot, epoch: number, gate: ProcessGate): SimDevicePort[] => {
    const alive = () => self.p?.alive === true;
    const member = () => self.p?.member ?? null;
    return units.map(
      (unit) =>
        new SimDevicePort(
          unit,
          world,
          rngLine,
          () => (faulty() ? profile.line : { ...profile.line, pLostAnswer: 0, pCrc: 0, pPowerLoss: 0 }),
          {
            enter: gate.io,
            beforeWrite: (cmd) => {
              if (!alive()) return;
              checker.onDeviceWrite(unit.id, cmd.holder, cmd.token, cmd.seq, epoch);
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
            ...(group
              ? {
                  permit: () => member()?.mayDriveDevices() === true,
                  onFrame: (cmd) => checker.onFrame(unit.id, cmd.holder, cmd.token, cmd.seq, slot.name, leaderIs(member()!)),
                }
              : {}),
          },
        ),
    );
  };

  const startProcess = (slot: Slot, journal: SimJournal) => {
    const epoch = nextEpoch++;
    const snapshots = journal.load();
    // The process being built; its ports may only act while it lives.
    const self: { p: Process | null } = { p: null };
    const alive = () => self.p?.alive === true;
    const gate = gateOf(self);
    const outbox = outboxFor(self, epoch);
    const ports = portsFor(self, slot, epoch, gate);
    // A group's standby opens no bus.
    if (group) for (const port of ports) port.setOpen(false);
    const bindings: ActuatorBinding[] = ports.map((port) => ({
      id: port.unit.id,
      config: configs.get(port.unit.id)!,
      device: port,
      fenced: port.unit.profile === "fenced",
      pollIntervalMs: 200,
      defaultDeadlineMs,
      authenticated: authenticated.has(port.unit.id),
    }));
    const gateway = new Gateway(
      {
        gatewayId: slot.name,
        journal,
        clock: world.clock,
        scheduler: world.schedulerFor(gate.timer),
        random,
        outbox,
        log: silentLog,
        actuators: bindings,
        onFatal: (err) => {
          if (alive()) checker.note(`fatal ${String(err)}`);
        },
        audit: profile.audit,
        step: judgedStep,
        ...(group ? { group: groupPort(() => self.p!.member!) } : {}),
      },
      snapshots,
    );
    const p: Process = {
      epoch,
      slot,
      alive: true,
      stopping: false,
      pausedUntilMs: 0,
      journal,
      gateway,
      member: null,
      etcd: null,
      role: group ? "standby" : "active",
      refs: new Map(),
    };
    self.p = p;
    slot.current = p;
    slot.journal = journal;
    checker.processStarted(epoch, group ? slot.name : "", group ? slot.name : null);
    checker.note(`start ${group ? `${slot.name} ` : ""}${epoch}`);
    if (!group) {
      gateway.start();
      return;
    }
    // As the daemon in a group: no start of its own; the member takes over when it leads.
    const joined = joinGroup(self, gateway, ports, gate);
    p.member = joined.member;
    p.etcd = joined.client;
    joined.member.start();
  };

  const slots: Slot[] = (group ? ["gw-a", "gw-b"] : ["sim"]).map((name) => {
    const slot: Slot = { name, journal: null!, current: null };
    slot.journal = SimJournal.open(16, journalHooks(slot));
    return slot;
  });
  for (const slot of slots) startProcess(slot, slot.journal);
  const running = () => slots.flatMap((s) => (s.current?.alive ? [s.current] : []));
  /** The process that takes requests, if any (a deposed one may not know yet: then two do). */
  const active = () => running().find((p) => p.member === null || p.member.phase === "active") ?? null;

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
        // The broker hands it to every gateway subscribed to the request topics: the active one,
        // and a deposed one that does not know yet. Nobody else.
        for (const p of running()) {
          if (p.role !== "active") continue;
          gateOf({ p }).io(() => {
            const ref = p.gateway.allocateRef();
            p.refs.set(ref, { controller: from, id, actuator, request });
            checker.note(`submit ${p.epoch} ${from.holder} ${id} ${actuator} ${JSON.stringify(request)}`);
            p.gateway.submit(actuator, ref, request);
          });
        }
      }),
    inTail: () => tail,
    onGranted: (actuator, holder, token) => checker.onControllerGranted(actuator, holder, token),
    onApplied: (actuator, holder, token, sentAtMs) => checker.onControllerApplied(actuator, holder, token, sentAtMs),
  };
  const controllers = Array.from({ length: options.controllers ?? 3 }, (_, i) => new Controller(`ctl-${i}`, i, env, root.fork()));
  for (const c of controllers) c.start();

  // ---------------------------------------------------------------------------------------
  // chaos, then quiet

  /** The gateway group's own faults, on the active gateway: paused past its etcd lease, cut off from etcd, killed. */
  const groupChaos = () => {
    const p = active();
    if (p === null || p.member === null || world.nowMs < p.pausedUntilMs) return;
    if (rngGroupChaos.chance(groupProfile.pPauseActive)) {
      const ms = rngGroupChaos.int(300, 1_500);
      p.pausedUntilMs = world.nowMs + ms;
      checker.onPaused(p.epoch, ms);
      fault("group.pauseActive");
    }
    if (rngGroupChaos.chance(groupProfile.pCutOff)) {
      p.etcd!.cutOffUntilMs = world.nowMs + rngGroupChaos.int(100, 1_500);
      fault("group.cutOffFromEtcd");
    }
    if (canCrash() && rngGroupChaos.chance(groupProfile.pCrashActive)) crash(p, "activeOfGroup");
  };

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
    const anyone = group ? rngGroupChaos.pick(slots).current : slots[0]!.current;
    if (anyone !== null && canCrash() && rngChaos.chance(profile.pCrash)) crash(anyone, "anytime");
    if (anyone?.alive && !anyone.stopping && canCrash() && rngChaos.chance(profile.pCleanRestart)) {
      crashes++; // counts against the same bound: a run must leave time for work between restarts
      cleanRestart(anyone);
    }
    if (group) groupChaos();
    world.after(CHAOS_TICK_MS, chaos);
  };
  world.after(CHAOS_TICK_MS, chaos);
  world.at(faultyMs, () => {
    tail = true;
    for (const c of controllers) c.link.partitionedUntilMs = 0;
    for (const unit of units) unit.busDown = false;
    for (const p of running()) if (p.etcd !== null) p.etcd.cutOffUntilMs = 0;
    checker.startTail();
  });

  // The halt: every controller stops dead, leaving its leases to run out, and in half the
  // seeds the gateway (a group's active one) dies right then too, so those leases end by its
  // restart (or the other's takeover) instead; in half, a device is unreachable for a while,
  // so a lease may run out while it is.
  world.at(faultyMs + tailMs, () => {
    for (const c of controllers) c.halt();
    checker.startHalt();
    const p = active();
    if (p !== null && rngChaos.chance(0.5)) crash(p, "atHalt");
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
    group,
  };
}
