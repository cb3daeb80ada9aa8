/**
 * The history checker. It keeps its own record of what the journal made durable, what the
 * gateway told every requester, what the gateway wrote to each device and what each device
 * actually applied, and checks the safety properties against that record alone: it never
 * reads the gateway's state or the core's bookkeeping.
 *
 *  1. writes and applies per actuator strictly increase in API (token, seq), across restarts
 *     (no stale accept, whatever the journal lost); a fenced device's own applied (token,
 *     device seq) strictly increase too;
 *  2. a device write leaves only under a token durably granted to its holder, its (token, seq)
 *     is above the durable fence as it stands then, and (but for the gateway's own safe-value
 *     write) its token is the live lease's, of that holder;
 *  3. an "applied" reply (also as a DUPLICATE's original) only for a command the device
 *     really applied; the audit trail (intents, outcomes: asynchronous, docs/mqtt-api.md) becomes
 *     durable in the order the commands were written, each intent within the audit lag of
 *     its write unless the process died first, and records "applied" only for what the
 *     device applied;
 *  4. a lease reply only for a durable grant; no token granted twice; tokens only rise;
 *  5. at most one live lease per actuator at any simulated instant (gateway time);
 *  6. liveness: in the quiet tail every actuator grants a lease to a controller and applies
 *     a command that controller sent under it;
 *  7. expiry policy "safe": at the end of the halt (every controller stopped dead, in half
 *     the seeds the gateway killed with them), an actuator whose newest lease ended other
 *     than by its holder's release (it ran out, or the gateway restarted or revoked it)
 *     was last moved by the gateway's own write, not left at a controller's value;
 *  8. authenticated actuators: a request signed with its lease's secret is never refused
 *     BAD_SIGNATURE (every simulated controller signs correctly), and a signed renew or
 *     release is accepted only with a counter above every one its lease accepted before (a
 *     duplicated or reordered one is a replay).
 */
import { createHash, type Hash } from "node:crypto";
import { GATEWAY_HOLDER } from "../core/actuator.ts";
import type { JournalRecord } from "../core/types.ts";
import type { JournalEntry, OutboundReply } from "../shell/ports.ts";
import type { GatewayRequest } from "../../packages/protocol/src/index.ts";

interface Pair {
  readonly token: number;
  /** null: a grant's fence, below every seq. */
  readonly seq: number | null;
}

function cmp(a: Pair, b: Pair): number {
  if (a.token !== b.token) return a.token - b.token;
  return (a.seq ?? -1) - (b.seq ?? -1);
}

const show = (p: Pair | null) => (p === null ? "none" : `(${p.token}, ${p.seq ?? "-"})`);
const key = (token: number, seq: number) => `${token}:${seq}`;

interface LiveLease {
  readonly holder: string;
  readonly token: number;
  readonly epoch: number;
  expiresAtMs: number;
}

class ActuatorHistory {
  // what the journal holds, folded by the checker itself
  durableFence: Pair = { token: 0, seq: null };
  readonly grants = new Map<number, string>();
  /** The newest intent the audit trail made durable: they come in the order written. */
  lastDurableIntent: Pair | null = null;
  // what happened at the device
  lastWrite: Pair | null = null;
  lastApplied: Pair | null = null;
  readonly applied = new Set<string>();
  // what the gateway said about leases
  lease: LiveLease | null = null;
  /** How the newest lease ended, once it has: null while it lives (or before any). */
  endedBy: "release" | "other" | null = null;
  highestReplied = 0;
  /** The highest counter a signed renew or release of each token was accepted with (rule 8). */
  readonly signedCounters = new Map<number, number>();
  /** Expiry policy "safe" (rule 7). */
  safe = false;
  // liveness, as controllers saw it
  readonly tailGrants = new Set<string>();
  tailSatisfied = false;
}

export interface CheckerCounts {
  accepted: number;
  /** Of those, the gateway's own safe-value writes on lease expiry. */
  safeWrites: number;
  applied: number;
  grants: number;
  refused: Map<string, number>;
}

export class Checker {
  readonly violations: string[] = [];
  readonly counts: CheckerCounts = { accepted: 0, safeWrites: 0, applied: 0, grants: 0, refused: new Map() };
  private readonly hash: Hash = createHash("sha256");
  private readonly actuators = new Map<string, ActuatorHistory>();
  private tailStartMs = Number.POSITIVE_INFINITY;
  private halted = false;
  /** Writes whose intent is not yet durable, oldest first, with when it must be (rule 3's lag). */
  private auditDue: { actuator: string; key: string; dueMs: number }[] = [];

  constructor(
    private readonly clock: () => number,
    actuatorIds: readonly string[],
    /** The audit writer's time bound: an intent is durable at most this long after its write. */
    private readonly auditLagMs: number,
    /** Bounded: a run that goes wrong stops collecting after this many. */
    private readonly maxViolations = 20,
    /** Receives every line of the history (`--trace`). */
    private readonly trace: ((line: string) => void) | null = null,
  ) {
    for (const id of actuatorIds) this.actuators.set(id, new ActuatorHistory());
  }

  /** Every observation goes into the history hash: same seed, same hash. */
  note(line: string): void {
    const stamped = `${this.clock()} ${line}`;
    this.hash.update(`${stamped}\n`);
    this.trace?.(stamped);
  }

  digest(): string {
    return this.hash.copy().digest("hex");
  }

  /** A core invariant broken by one step (src/core/invariants.ts), judged as the step is taken. */
  onInvariantBroken(actuator: string, inputType: string, broken: readonly string[]): void {
    for (const what of broken) this.violate(`invariant ${actuator} after ${inputType}: ${what}`);
  }

  private violate(message: string): void {
    this.note(`VIOLATION ${message}`);
    if (this.violations.length < this.maxViolations) this.violations.push(`t=${this.clock()}ms ${message}`);
  }

  private of(actuator: string): ActuatorHistory {
    const h = this.actuators.get(actuator);
    if (!h) throw new Error(`checker: unknown actuator ${actuator}`);
    return h;
  }

  // -------------------------------------------------------------------------------------
  // the journal

  /** A commit returned: its entries are durable. */
  onDurable(entries: readonly JournalEntry[]): void {
    this.checkAuditLag();
    for (const { actuator, record } of entries) this.onDurableRecord(actuator, this.of(actuator), record);
  }

  private onDurableRecord(actuator: string, h: ActuatorHistory, record: JournalRecord): void {
    this.note(`durable ${actuator} ${JSON.stringify(record)}`);
    switch (record.type) {
      case "granted":
        if (h.grants.has(record.token))
          this.violate(`${actuator}: token ${record.token} granted twice (to ${h.grants.get(record.token)} and ${record.holder})`);
        if (record.token <= h.durableFence.token)
          this.violate(`${actuator}: token ${record.token} granted at or below the durable fence ${show(h.durableFence)}`);
        h.grants.set(record.token, record.holder);
        this.raise(h, { token: record.token, seq: null });
        return;
      case "intent": {
        const p = { token: record.token, seq: record.seq };
        if (h.lastDurableIntent !== null && cmp(p, h.lastDurableIntent) <= 0)
          this.violate(`${actuator}: the audit record of ${show(p)} became durable after that of ${show(h.lastDurableIntent)}`);
        h.lastDurableIntent = p;
        const k = key(record.token, record.seq);
        this.auditDue = this.auditDue.filter((d) => d.actuator !== actuator || d.key !== k);
        this.raise(h, p);
        return;
      }
      case "outcome":
        if (record.outcome.kind === "applied" && !h.applied.has(key(record.token, record.seq)))
          this.violate(`${actuator}: the audit trail records (${record.token}, ${record.seq}) applied, which the device never applied`);
        return;
      case "fenceObserved":
        this.raise(h, { token: record.token, seq: record.seq });
        return;
    }
  }

  private raise(h: ActuatorHistory, p: Pair): void {
    if (cmp(p, h.durableFence) > 0) h.durableFence = p;
  }

  // -------------------------------------------------------------------------------------
  // the devices

  /** The gateway handed a command to the device port: the moment it was accepted. */
  onDeviceWrite(actuator: string, holder: string, token: number, seq: number): void {
    const h = this.of(actuator);
    this.note(`write ${actuator} ${holder} (${token}, ${seq})`);
    this.counts.accepted++;
    if (holder === GATEWAY_HOLDER) this.counts.safeWrites++;
    this.checkAuditLag();
    if (h.grants.get(token) !== holder)
      this.violate(`${actuator}: (${token}, ${seq}) of ${holder} was written to the device under a token not durably granted to ${holder}`);
    if (cmp({ token, seq }, h.durableFence) <= 0)
      this.violate(`${actuator}: (${token}, ${seq}) accepted at or below the durable fence ${show(h.durableFence)}`);
    this.auditDue.push({ actuator, key: key(token, seq), dueMs: this.clock() + this.auditLagMs });
    // The gateway's own safe-value write needs no lease; every other write needs the live one.
    const live = h.lease !== null && this.clock() < h.lease.expiresAtMs ? h.lease : null;
    if (holder !== GATEWAY_HOLDER && (live === null || live.token !== token || live.holder !== holder)) {
      this.violate(
        `${actuator}: (${token}, ${seq}) of ${holder} accepted while the live lease is ${live ? `${live.token} of ${live.holder}` : "none"}`,
      );
    }
    const p = { token, seq };
    if (h.lastWrite !== null && cmp(p, h.lastWrite) <= 0)
      this.violate(`${actuator}: write (${token}, ${seq}) after write ${show(h.lastWrite)}`);
    h.lastWrite = p;
  }

  /** The device acted on a command carrying API (token, seq). */
  onDeviceApplied(actuator: string, token: number, seq: number): void {
    const h = this.of(actuator);
    this.note(`applied ${actuator} (${token}, ${seq})`);
    const p = { token, seq };
    if (h.lastApplied !== null && cmp(p, h.lastApplied) <= 0)
      this.violate(`${actuator}: device applied (${token}, ${seq}) after ${show(h.lastApplied)}`);
    h.lastApplied = p;
    h.applied.add(key(token, seq));
  }

  /** A fenced device's own log: (token, device seq) in the order it acted. */
  checkDeviceLog(actuator: string, log: readonly { token?: number | undefined; seq?: number | undefined }[]): void {
    let prev: Pair | null = null;
    for (const entry of log) {
      if (entry.token === undefined || entry.seq === undefined) continue;
      const p = { token: entry.token, seq: entry.seq };
      if (prev !== null && cmp(p, prev) <= 0) this.violate(`${actuator}: the fenced device applied ${show(p)} after ${show(prev)}`);
      prev = p;
    }
  }

  // -------------------------------------------------------------------------------------
  // what the gateway said

  onCrash(epoch: number): void {
    this.note(`crash ${epoch}`);
    // What the process had not yet committed is lost with it: allowed, once within the lag.
    this.checkAuditLag();
    this.auditDue = [];
    for (const h of this.actuators.values()) this.endLease(h, "other"); // every lease ends with the process
  }

  /** A lease ended early by the gateway's own decision (a device fence ahead of its own). */
  onLeaseRevoked(actuator: string, token: number): void {
    const h = this.of(actuator);
    if (h.lease?.token === token) this.endLease(h, "other");
  }

  private endLease(h: ActuatorHistory, by: "release" | "other"): void {
    if (h.lease === null) return;
    // A lease past its expiry had ended by then, whatever came after.
    h.endedBy = this.clock() >= h.lease.expiresAtMs ? "other" : by;
    h.lease = null;
  }

  onReply(epoch: number, actuator: string, request: GatewayRequest, reply: OutboundReply): void {
    const h = this.of(actuator);
    const now = this.clock();
    this.checkAuditLag();
    this.note(`reply ${epoch} ${actuator} ${JSON.stringify(request)} -> ${JSON.stringify(reply)}`);
    if (!reply.ok) {
      const code = reply.error.code;
      this.counts.refused.set(code, (this.counts.refused.get(code) ?? 0) + 1);
      const original = reply.error.original;
      if (code === "DUPLICATE" && original?.ok === true && "outcome" in original)
        this.checkApplied(actuator, h, original.token, original.seq);
      if (code === "BAD_SIGNATURE")
        this.violate(`${actuator}: ${JSON.stringify(request)}, signed with its lease's secret, refused BAD_SIGNATURE`);
      return;
    }
    if ((request.verb === "lease/renew" || request.verb === "lease/release") && typeof request.counter === "number") {
      const last = h.signedCounters.get(request.token) ?? 0;
      if (request.counter <= last)
        this.violate(
          `${actuator}: signed ${request.verb} of lease ${request.token} accepted with counter ${request.counter}, not above ${last}: a replay`,
        );
      else h.signedCounters.set(request.token, request.counter);
    }
    if ("outcome" in reply) {
      this.counts.applied++;
      this.checkApplied(actuator, h, reply.token, reply.seq);
      return;
    }
    if (!("lease" in reply)) return; // a read
    if (reply.lease === null) {
      if (request.verb === "lease/release" && h.lease?.token === request.token) this.endLease(h, "release");
      return;
    }
    const { holder, token, ttlMs } = reply.lease;
    if (h.grants.get(token) !== holder)
      this.violate(`${actuator}: lease ${token} for ${holder} replied without a durable grant to that holder`);
    const live = h.lease !== null && now < h.lease.expiresAtMs ? h.lease : null;
    if (live !== null && live.token === token && live.holder === holder && live.epoch === epoch) {
      live.expiresAtMs = now + ttlMs; // a renewal, or the live holder's repeated acquire
      return;
    }
    if (request.verb === "lease/renew") this.violate(`${actuator}: renewed lease ${token} of ${holder}, which was not live`);
    if (live !== null)
      this.violate(
        `${actuator}: lease ${token} to ${holder} while lease ${live.token} of ${live.holder} is live for ${live.expiresAtMs - now} ms more`,
      );
    if (token <= h.highestReplied)
      this.violate(`${actuator}: token ${token} granted to ${holder} after token ${h.highestReplied} (granted twice, or going back)`);
    h.highestReplied = Math.max(h.highestReplied, token);
    h.lease = { holder, token, epoch, expiresAtMs: now + ttlMs };
    h.endedBy = null;
    this.counts.grants++;
  }

  private checkApplied(actuator: string, h: ActuatorHistory, token: number, seq: number): void {
    if (!h.applied.has(key(token, seq)))
      this.violate(`${actuator}: "applied" replied for (${token}, ${seq}), which the device never applied`);
  }

  /** Rule 3's bound: no intent of a live process waits past the audit lag for its commit. */
  private checkAuditLag(): void {
    const now = this.clock();
    while (this.auditDue.length > 0 && this.auditDue[0]!.dueMs < now) {
      const late = this.auditDue.shift()!;
      this.violate(
        `${late.actuator}: the audit record of (${late.key.replace(":", ", ")}) was not durable ${this.auditLagMs} ms after its write (the audit lag)`,
      );
    }
  }

  // -------------------------------------------------------------------------------------
  // liveness, from the controllers' side

  startTail(): void {
    this.tailStartMs = this.clock();
    this.note("tail");
  }

  onControllerGranted(actuator: string, holder: string, token: number): void {
    if (this.clock() >= this.tailStartMs) this.of(actuator).tailGrants.add(`${holder}:${token}`);
  }

  onControllerApplied(actuator: string, holder: string, token: number, sentAtMs: number): void {
    const h = this.of(actuator);
    if (sentAtMs >= this.tailStartMs && h.tailGrants.has(`${holder}:${token}`)) h.tailSatisfied = true;
  }

  /** Rule 7 applies to this actuator. */
  expectSafeValues(actuator: string): void {
    this.of(actuator).safe = true;
  }

  /** Every controller stopped dead: from here on leases only end. */
  startHalt(): void {
    this.halted = true;
    this.note("halt");
  }

  finish(): void {
    this.checkAuditLag();
    for (const [id, h] of this.actuators) {
      if (!h.tailSatisfied) this.violate(`liveness: ${id} granted no lease with an applied command in the quiet tail`);
      if (this.halted && h.safe) this.checkSafeValues(id, h);
    }
  }

  private checkSafeValues(actuator: string, h: ActuatorHistory): void {
    if (h.lease !== null) this.endLease(h, "other"); // it can only have run out by now
    if (h.endedBy !== "other" || h.lastApplied === null) return;
    const holder = h.grants.get(h.lastApplied.token);
    if (holder !== GATEWAY_HOLDER) {
      this.violate(
        `${actuator}: its lease ended (not released) and the device was left at ${holder ?? "an unknown holder"}'s ${show(h.lastApplied)}, not at the safe values`,
      );
    }
  }
}
