/**
 * What the status page shows, kept up to date from what the shell hands out: the decisions
 * and states of the outbox, the records the journal made durable, and the buses' answers.
 * It never reads the core's state: the shell hands these over only after the journal
 * records they depend on are durable, so the page never shows a lease, token or fence a
 * crash could take back.
 *
 * Everything is bounded: the feed keeps the newest FEED_LIMIT decisions, refusal counts
 * are kept per second for one minute, and the set of keys (actuators, codes) is fixed.
 * Feeding it costs a few field updates per decision; the JSON is built only when a reader
 * asks (a page load, or the event-stream hub once per flush), in the shapes of status-api.ts.
 */
import { GATEWAY_HOLDER } from "../../core/actuator.ts";
import type { CoreEvent, Fence, PointValues } from "../../core/types.ts";
import type { JournalEntry, StateView } from "../../shell/ports.ts";
import type { ActuatorCard, Counters, Decision, GatewayLine, StatusSnapshot } from "./status-api.ts";

/** Decisions kept for a page that opens (newest last). */
export const FEED_LIMIT = 200;
const MINUTE_MS = 60_000;
/** A renewal moves the expiry; a later view of the same lease differs only by the clock's rounding. */
const EXPIRY_JITTER_MS = 250;

/** Facts about the gateway that are read when a page asks, never pushed. */
export interface GatewayFacts {
  brokerConnected(): boolean;
  buses(): readonly { readonly name: string; readonly up: boolean }[];
  /**
   * The asynchronous audit trail's lag: records handed to the journal and not yet durable,
   * the age of the oldest (ms), and the journal's commits so far.
   */
  auditLag(): { readonly records: number; readonly oldestMs: number; readonly commits: number };
  /** Why the journal cannot commit, or null. */
  journalProblem(): string | null;
  /** Why /healthz answers 503, or null while it answers 200. */
  healthProblem(): string | null;
  /** In a gateway group: the member's phase, and why it cannot reach etcd (null while it can). */
  group?(): { readonly phase: string; readonly etcdProblem: string | null };
}

/**
 * What a group member that is not serving says on every card instead of the device's own
 * problem: it does not drive the devices, so its view of them is not the group's.
 */
function groupNote(group: { readonly phase: string; readonly etcdProblem: string | null } | null): string | null {
  if (group === null || group.phase === "active") return null;
  if (group.etcdProblem !== null)
    return "cannot reach etcd: this gateway neither serves nor can take over, and cannot tell whether another gateway serves (see /healthz)";
  return "stands by: the group's active gateway serves this actuator";
}

export interface ActuatorInfo {
  readonly id: string;
  readonly bus: string;
  readonly unit: number;
  readonly profile: "fenced" | "plain";
  readonly expiry: "hold" | "safe";
  /** Point names in display order, with their unit of measure ("" when none) and whether commands may set them. */
  readonly points: readonly { readonly name: string; readonly unit: string; readonly writable: boolean }[];
}

export interface BoardClock {
  monotonicMs(): number;
}

export interface BoardOptions {
  readonly gatewayId: string;
  readonly version: string;
  readonly actuators: readonly ActuatorInfo[];
  readonly facts: GatewayFacts;
  readonly clock: BoardClock;
}

interface CommandSeen {
  readonly holder: string;
  readonly token: number;
  readonly seq: number;
  readonly atMs: number;
  set: PointValues | null;
  outcome: string | null;
}

interface RefusalSeen {
  readonly holder: string | null;
  readonly token: number | null;
  readonly seq: number | null;
  readonly code: string;
  readonly atMs: number;
}

/** The gateway's own safe write while the state says it is owed (it retries until the device confirms it). */
interface SafeWriteSeen {
  readonly sinceMs: number;
  readonly token: number;
  readonly attempts: number;
  readonly set: PointValues;
  /** Why the last attempt did not settle it (a refusal or an unknown outcome), or null. */
  lastCode: string | null;
}

/** Counts per key over the last minute, in one-second buckets: at most 60 of them. */
export class MinuteCounts {
  private readonly buckets: { readonly second: number; readonly counts: Map<string, number> }[] = [];

  add(nowMs: number, key: string): void {
    const second = Math.floor(nowMs / 1000);
    let last = this.buckets[this.buckets.length - 1];
    if (last === undefined || last.second !== second) {
      last = { second, counts: new Map() };
      this.buckets.push(last);
      if (this.buckets.length > MINUTE_MS / 1000) this.buckets.shift();
    }
    last.counts.set(key, (last.counts.get(key) ?? 0) + 1);
  }

  /** Counts of the last 60 seconds by key, keys sorted. */
  totals(nowMs: number): Record<string, number> {
    const from = Math.floor(nowMs / 1000) - MINUTE_MS / 1000 + 1;
    const sums = new Map<string, number>();
    for (const b of this.buckets) if (b.second >= from) for (const [k, n] of b.counts) sums.set(k, (sums.get(k) ?? 0) + n);
    return Object.fromEntries([...sums].sort(([a], [b]) => (a < b ? -1 : 1)));
  }
}

class ActuatorBoard {
  online = false;
  lease: { holder: string; token: number; expiresAtMs: number } | null = null;
  fence: Fence = { token: 0, seq: null };
  points: PointValues = {};
  pointFaults: Readonly<Record<string, string>> = {};
  /** When the points were read (monotonic ms), or null: never since start. */
  pointsAtMs: number | null = null;
  /** Why it is offline or cannot be leased, when the gateway knows. */
  problem: string | null = null;
  /** The gateway serving it (its status topic says whether the state is current). */
  gateway = "";
  /** When the device last answered a transaction (monotonic ms), and how long that took. */
  lastAnswerAtMs: number | null = null;
  lastAnswerRttMs: number | null = null;
  lastAccepted: CommandSeen | null = null;
  /** The newest intent the journal made durable: the set of an accepted command, whichever comes first. */
  lastIntent: { readonly token: number; readonly seq: number; readonly set: PointValues } | null = null;
  lastRefusal: RefusalSeen | null = null;
  safeWrite: SafeWriteSeen | null = null;
  readonly refusals = new MinuteCounts();
  readonly outcomeUnknown = new MinuteCounts();
  outcomeUnknownTotal = 0;

  constructor(readonly info: ActuatorInfo) {}
}

export type BoardListener = (change: { readonly decision: Decision } | { readonly actuator: string }) => void;

export class StatusBoard {
  private readonly actuators = new Map<string, ActuatorBoard>();
  private readonly feed: Decision[] = [];
  private decisions = 0;
  private readonly startedAtMs: number;
  private lastDurableAtMs: number | null = null;
  private readonly listeners = new Set<BoardListener>();

  constructor(private readonly options: BoardOptions) {
    this.startedAtMs = options.clock.monotonicMs();
    for (const info of options.actuators) this.actuators.set(info.id, new ActuatorBoard(info));
  }

  has(actuator: string): boolean {
    return this.actuators.has(actuator);
  }

  /** Calls `listener` on every new decision and every changed actuator; returns the unsubscribe. */
  subscribe(listener: BoardListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // -------------------------------------------------------------------------------------
  // Inputs, from the shell and the buses

  /** A decision, as published on B/A/events (after the journal records it depends on are durable). */
  event(actuator: string, event: CoreEvent & { readonly at: Date }): void {
    const a = this.actuators.get(actuator);
    if (a === undefined) return;
    const nowMs = this.options.clock.monotonicMs();
    const safeWrite = event.holder === GATEWAY_HOLDER;
    switch (event.type) {
      case "accepted":
        if (event.holder !== undefined && event.token !== undefined && event.seq !== undefined) {
          const intent = a.lastIntent;
          const set = intent !== null && intent.token === event.token && intent.seq === event.seq ? intent.set : null;
          a.lastAccepted = { holder: event.holder, token: event.token, seq: event.seq, atMs: nowMs, set, outcome: null };
        }
        break;
      case "applied":
        this.settle(a, event, "applied");
        break;
      case "outcome-unknown":
        this.settle(a, event, "OUTCOME_UNKNOWN");
        a.outcomeUnknown.add(nowMs, "OUTCOME_UNKNOWN");
        a.outcomeUnknownTotal++;
        if (safeWrite && a.safeWrite !== null) a.safeWrite.lastCode = "OUTCOME_UNKNOWN";
        break;
      case "rejected": {
        const code = event.code ?? "UNKNOWN";
        a.lastRefusal = { holder: event.holder ?? null, token: event.token ?? null, seq: event.seq ?? null, code, atMs: nowMs };
        a.refusals.add(nowMs, code);
        this.settle(a, event, code);
        if (safeWrite && a.safeWrite !== null) a.safeWrite.lastCode = code;
        break;
      }
      default:
        break;
    }
    const decision: Decision = {
      n: ++this.decisions,
      at: event.at.toISOString(),
      actuator,
      type: event.type,
      ...(event.holder !== undefined ? { holder: event.holder } : {}),
      ...(event.token !== undefined ? { token: event.token } : {}),
      ...(event.seq !== undefined ? { seq: event.seq } : {}),
      ...(event.code !== undefined ? { code: event.code } : {}),
      safeWrite,
    };
    this.feed.push(decision);
    if (this.feed.length > FEED_LIMIT) this.feed.shift();
    this.notify({ decision });
    this.notify({ actuator });
  }

  /** Every state view the shell computed, published or not (a renewal moves only the expiry). */
  state(view: StateView): void {
    const a = this.actuators.get(view.actuator);
    if (a === undefined) return;
    const nowMs = this.options.clock.monotonicMs();
    const lease = view.lease && { holder: view.lease.holder, token: view.lease.token, expiresAtMs: nowMs + view.lease.expiresInMs };
    const changed =
      a.online !== view.online ||
      !sameLease(a.lease, lease) ||
      a.fence.token !== view.fence.token ||
      a.fence.seq !== view.fence.seq ||
      !samePoints(a.points, view.points);
    const safe = view.safeWrite;
    const safeChanged =
      safe === null
        ? a.safeWrite !== null
        : a.safeWrite === null || a.safeWrite.token !== safe.token || a.safeWrite.attempts !== safe.attempts;
    const substance =
      changed || safeChanged || a.problem !== view.problem || a.gateway !== view.gateway || !sameStrings(a.pointFaults, view.pointFaults);
    a.online = view.online;
    a.lease = lease;
    a.fence = view.fence;
    a.points = view.points;
    a.pointFaults = view.pointFaults;
    a.pointsAtMs = view.pointsAgeMs === null ? null : nowMs - view.pointsAgeMs;
    a.problem = view.problem;
    a.gateway = view.gateway;
    if (safe === null) a.safeWrite = null;
    else if (safeChanged)
      a.safeWrite = {
        sinceMs: a.safeWrite?.sinceMs ?? nowMs,
        token: safe.token,
        attempts: safe.attempts,
        set: safe.set,
        lastCode: a.safeWrite?.lastCode ?? null,
      };
    if (substance) this.notify({ actuator: view.actuator });
  }

  /** Records the journal made durable: the set of an accepted command is known from here. */
  durable(entries: readonly JournalEntry[]): void {
    this.lastDurableAtMs = this.options.clock.monotonicMs();
    for (const { actuator, record } of entries) {
      const a = this.actuators.get(actuator);
      if (record.type !== "intent" || a === undefined) continue;
      a.lastIntent = { token: record.token, seq: record.seq, set: record.set };
      const seen = a.lastAccepted;
      if (seen && seen.set === null && seen.token === record.token && seen.seq === record.seq) {
        seen.set = record.set;
        this.notify({ actuator });
      }
    }
  }

  /** A transaction with the actuator's device ended; `answered`: the device replied (data or an exception). */
  answer(actuator: string, answered: boolean, seconds: number): void {
    const a = this.actuators.get(actuator);
    if (a === undefined || !answered) return;
    a.lastAnswerAtMs = this.options.clock.monotonicMs();
    a.lastAnswerRttMs = seconds * 1000;
  }

  // -------------------------------------------------------------------------------------
  // Outputs

  /** The gateway line and the counters: cheap, sent to open pages every couple of seconds. */
  gateway(): GatewayLine {
    const { facts, gatewayId, version, clock } = this.options;
    const nowMs = clock.monotonicMs();
    const lag = facts.auditLag();
    return {
      id: gatewayId,
      version,
      uptimeMs: nowMs - this.startedAtMs,
      broker: { connected: facts.brokerConnected() },
      health: { problem: facts.healthProblem() },
      group: this.groupFact(),
      journal: {
        lastCommitAgeMs: this.lastDurableAtMs === null ? null : nowMs - this.lastDurableAtMs,
        auditLag: { records: lag.records, oldestMs: Math.round(lag.oldestMs), commits: lag.commits },
        problem: facts.journalProblem(),
      },
      buses: facts.buses(),
      counters: this.counters(nowMs),
      // Grows between full updates: the page shows it against its own clock.
      lastAnswerAgeMs: Object.fromEntries([...this.actuators].map(([id, a]) => [id, ageMs(nowMs, a.lastAnswerAtMs)])),
    };
  }

  /** One actuator's card, or undefined for an id this gateway does not have. */
  actuator(id: string): ActuatorCard | undefined {
    const a = this.actuators.get(id);
    if (a === undefined) return undefined;
    const nowMs = this.options.clock.monotonicMs();
    const { info } = a;
    return {
      id,
      bus: info.bus,
      unit: info.unit,
      profile: info.profile,
      expiry: info.expiry,
      gateway: a.gateway,
      online: a.online,
      problem: this.groupFact()?.note ?? a.problem,
      lastAnswerAgeMs: ageMs(nowMs, a.lastAnswerAtMs),
      rttMs: a.lastAnswerRttMs === null ? null : round1(a.lastAnswerRttMs),
      lease: a.lease && { holder: a.lease.holder, token: a.lease.token, expiresInMs: Math.max(0, a.lease.expiresAtMs - nowMs) },
      fence: a.fence,
      pointsAgeMs: ageMs(nowMs, a.pointsAtMs),
      points: info.points.map((p) => ({
        name: p.name,
        unit: p.unit,
        writable: p.writable,
        value: a.points[p.name] ?? null,
        fault: a.pointFaults[p.name] ?? null,
      })),
      lastAccepted: a.lastAccepted && {
        holder: a.lastAccepted.holder,
        token: a.lastAccepted.token,
        seq: a.lastAccepted.seq,
        set: a.lastAccepted.set,
        outcome: a.lastAccepted.outcome,
        ageMs: nowMs - a.lastAccepted.atMs,
      },
      lastRefusal: a.lastRefusal && {
        holder: a.lastRefusal.holder,
        token: a.lastRefusal.token,
        seq: a.lastRefusal.seq,
        code: a.lastRefusal.code,
        ageMs: nowMs - a.lastRefusal.atMs,
      },
      safeWrite: a.safeWrite && {
        token: a.safeWrite.token,
        attempts: a.safeWrite.attempts,
        set: a.safeWrite.set,
        lastCode: a.safeWrite.lastCode,
        ageMs: nowMs - a.safeWrite.sinceMs,
      },
      refusalsLastMinute: a.refusals.totals(nowMs),
      outcomeUnknownLastMinute: a.outcomeUnknown.totals(nowMs)["OUTCOME_UNKNOWN"] ?? 0,
      outcomeUnknownTotal: a.outcomeUnknownTotal,
    };
  }

  /** The member's phase and what its cards say, or null for a gateway on its own. */
  private groupFact(): { phase: string; note: string | null } | null {
    const group = this.options.facts.group?.() ?? null;
    return group && { phase: group.phase, note: groupNote(group) };
  }

  /** Everything a page needs to draw itself. */
  snapshot(): StatusSnapshot {
    return {
      gateway: this.gateway(),
      actuators: [...this.actuators.keys()].map((id) => this.actuator(id)!),
      feed: [...this.feed],
    };
  }

  private counters(nowMs: number): Counters {
    let online = 0;
    let leases = 0;
    let outcomeUnknown = 0;
    const refusals: Record<string, number> = {};
    for (const a of this.actuators.values()) {
      if (a.online) online++;
      if (a.lease !== null && a.lease.expiresAtMs > nowMs) leases++;
      outcomeUnknown += a.outcomeUnknown.totals(nowMs)["OUTCOME_UNKNOWN"] ?? 0;
      for (const [code, n] of Object.entries(a.refusals.totals(nowMs))) refusals[code] = (refusals[code] ?? 0) + n;
    }
    return {
      actuators: this.actuators.size,
      online,
      offline: this.actuators.size - online,
      leases,
      refusalsLastMinute: refusals,
      outcomeUnknownLastMinute: outcomeUnknown,
    };
  }

  /** The first outcome of the last accepted command wins, as in the journal (a later DUPLICATE is not one). */
  private settle(a: ActuatorBoard, event: CoreEvent, outcome: string): void {
    const seen = a.lastAccepted;
    if (seen && seen.outcome === null && seen.token === event.token && seen.seq === event.seq && seen.holder === event.holder)
      seen.outcome = outcome;
  }

  private notify(change: Parameters<BoardListener>[0]): void {
    for (const listener of this.listeners) listener(change);
  }
}

function ageMs(nowMs: number, atMs: number | null): number | null {
  return atMs === null ? null : Math.round(nowMs - atMs);
}

function round1(x: number): number {
  return Math.round(x * 10) / 10;
}

function sameLease(
  a: { holder: string; token: number; expiresAtMs: number } | null,
  b: { holder: string; token: number; expiresAtMs: number } | null,
): boolean {
  if (a === null || b === null) return a === b;
  return a.holder === b.holder && a.token === b.token && Math.abs(a.expiresAtMs - b.expiresAtMs) < EXPIRY_JITTER_MS;
}

function sameStrings(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k]);
}

function samePoints(a: PointValues, b: PointValues): boolean {
  if (a === b) return true;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => a[k] === b[k]);
}
