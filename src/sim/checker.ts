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
 *
 * In a gateway group (two gateways, each its own journal, the same devices) rules 2 to 5 are
 * judged per gateway process, against that gateway's own journal and its own replies (every
 * lease ends at a takeover: the new gateway cannot know the old one's), and rules 1, 6 and 7
 * across the group, the writes at the moment their frame leaves (a deposed gateway may hand
 * a write to its bus, which refuses to send it). And:
 *  9. a frame leaves a gateway only while the group's leader key is its own, and every token
 *     it uses (a lease replied, a write) is in the group's counter, committed by it; each
 *     token was committed above every token before it, and is granted to one holder (replies
 *     are judged in commit order: a paused gateway's reply can arrive after newer grants).
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

/** What one gateway's journal holds of an actuator, folded by the checker itself. */
class JournalView {
  durableFence: Pair = { token: 0, seq: null };
  readonly grants = new Map<number, string>();
  /** The newest intent the audit trail made durable: they come in the order written. */
  lastDurableIntent: Pair | null = null;
}

/** A gateway process, as the checker knows it: the journal it writes, and its gateway group's name for it. */
interface ProcessInfo {
  readonly journal: string;
  readonly member: string | null;
}

class ActuatorHistory {
  /** Per journal: one alone, one per gateway of a group. */
  readonly journals = new Map<string, JournalView>();
  // what happened at the device
  lastWrite: Pair | null = null;
  lastApplied: Pair | null = null;
  readonly applied = new Set<string>();
  /** Per token, whose commands were sent under it (rule 7 names the last applied's). */
  readonly sentFor = new Map<number, string>();
  // what the gateways said about leases
  /** Per gateway process (epoch): its live lease. */
  readonly leases = new Map<number, LiveLease>();
  /** The lease granted last, by any process: rule 7 asks how it ended. */
  newest: LiveLease | null = null;
  /** How the newest lease ended, once it has: null while it lives (or before any). */
  endedBy: "release" | "other" | null = null;
  highestReplied = 0;
  /** Gateway group: each token in the group's counter, and which member committed it. */
  readonly committed = new Map<number, string>();
  /** Gateway group: the highest token in the group's counter when each token was committed. */
  readonly committedAbove = new Map<number, number>();
  highestCommitted = 0;
  /** Gateway group: the holder each token's lease was replied to. */
  readonly repliedTo = new Map<number, string>();
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
  private auditDue: { actuator: string; key: string; dueMs: number; epoch: number }[] = [];
  private readonly processes = new Map<number, ProcessInfo>();

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

  /** A gateway process starts, writing `journal` ("" alone), as `member` of a gateway group (null alone). */
  processStarted(epoch: number, journal: string, member: string | null): void {
    this.processes.set(epoch, { journal, member });
  }

  private process(epoch: number): ProcessInfo {
    return this.processes.get(epoch) ?? { journal: "", member: null };
  }

  private journalOf(h: ActuatorHistory, journal: string): JournalView {
    let view = h.journals.get(journal);
    if (view === undefined) h.journals.set(journal, (view = new JournalView()));
    return view;
  }

  /** The process's live lease on the actuator at this instant, or null. */
  private liveLease(h: ActuatorHistory, epoch: number): LiveLease | null {
    const lease = h.leases.get(epoch);
    return lease !== undefined && this.clock() < lease.expiresAtMs ? lease : null;
  }

  // -------------------------------------------------------------------------------------
  // the journal

  /** A commit returned: its entries are durable (in `journal`, "" alone). */
  onDurable(entries: readonly JournalEntry[], journal = ""): void {
    this.checkAuditLag();
    for (const { actuator, record } of entries) this.onDurableRecord(actuator, record, journal);
  }

  private onDurableRecord(actuator: string, record: JournalRecord, journal: string): void {
    const h = this.of(actuator);
    const j = this.journalOf(h, journal);
    this.note(`durable ${journal === "" ? "" : `${journal} `}${actuator} ${JSON.stringify(record)}`);
    switch (record.type) {
      case "granted":
        if (j.grants.has(record.token))
          this.violate(`${actuator}: token ${record.token} granted twice (to ${j.grants.get(record.token)} and ${record.holder})`);
        if (record.token <= j.durableFence.token)
          this.violate(`${actuator}: token ${record.token} granted at or below the durable fence ${show(j.durableFence)}`);
        j.grants.set(record.token, record.holder);
        this.raise(j, { token: record.token, seq: null });
        return;
      case "intent": {
        const p = { token: record.token, seq: record.seq };
        if (j.lastDurableIntent !== null && cmp(p, j.lastDurableIntent) <= 0)
          this.violate(`${actuator}: the audit record of ${show(p)} became durable after that of ${show(j.lastDurableIntent)}`);
        j.lastDurableIntent = p;
        const k = key(record.token, record.seq);
        this.auditDue = this.auditDue.filter((d) => d.actuator !== actuator || d.key !== k);
        this.raise(j, p);
        return;
      }
      case "outcome":
        if (record.outcome.kind === "applied" && !h.applied.has(key(record.token, record.seq)))
          this.violate(`${actuator}: the audit trail records (${record.token}, ${record.seq}) applied, which the device never applied`);
        return;
      case "fenceObserved":
        this.raise(j, { token: record.token, seq: record.seq });
        return;
    }
  }

  private raise(h: JournalView, p: Pair): void {
    if (cmp(p, h.durableFence) > 0) h.durableFence = p;
  }

  // -------------------------------------------------------------------------------------
  // the devices

  /**
   * Process `epoch` handed a command to the device port: the moment it was accepted. Alone,
   * its frame leaves now too; in a group, {@link onFrame} says when (or whether) it does.
   */
  onDeviceWrite(actuator: string, holder: string, token: number, seq: number, epoch: number): void {
    const h = this.of(actuator);
    const { journal, member } = this.process(epoch);
    const j = this.journalOf(h, journal);
    this.note(`write ${member === null ? "" : `${member} `}${actuator} ${holder} (${token}, ${seq})`);
    this.counts.accepted++;
    if (holder === GATEWAY_HOLDER) this.counts.safeWrites++;
    this.checkAuditLag();
    if (j.grants.get(token) !== holder)
      this.violate(`${actuator}: (${token}, ${seq}) of ${holder} was written to the device under a token not durably granted to ${holder}`);
    if (cmp({ token, seq }, j.durableFence) <= 0)
      this.violate(`${actuator}: (${token}, ${seq}) accepted at or below the durable fence ${show(j.durableFence)}`);
    this.auditDue.push({ actuator, key: key(token, seq), dueMs: this.clock() + this.auditLagMs, epoch });
    // The gateway's own safe-value write needs no lease; every other write needs the live one.
    const live = this.liveLease(h, epoch);
    if (holder !== GATEWAY_HOLDER && (live === null || live.token !== token || live.holder !== holder)) {
      this.violate(
        `${actuator}: (${token}, ${seq}) of ${holder} accepted while the live lease is ${live ? `${live.token} of ${live.holder}` : "none"}`,
      );
    }
    if (member === null) this.frameLeft(actuator, h, holder, token, seq);
    else if (!this.inGroupCounter(h, member, holder, token))
      this.violate(`${actuator}: (${token}, ${seq}) of ${holder} accepted by ${member} under a token it never committed to the group`);
  }

  /** Gateway group: the frame of a write leaves `member`, which holds the group's leader key or not. */
  onFrame(actuator: string, holder: string, token: number, seq: number, member: string, leader: boolean): void {
    this.note(`frame ${member} ${actuator} (${token}, ${seq})`);
    if (!leader) this.violate(`${actuator}: the frame of (${token}, ${seq}) left ${member} while the group's leader key was not its own`);
    this.frameLeft(actuator, this.of(actuator), holder, token, seq);
  }

  private frameLeft(actuator: string, h: ActuatorHistory, holder: string, token: number, seq: number): void {
    const p = { token, seq };
    if (h.lastWrite !== null && cmp(p, h.lastWrite) <= 0)
      this.violate(`${actuator}: write (${token}, ${seq}) after write ${show(h.lastWrite)}`);
    h.lastWrite = p;
    h.sentFor.set(token, holder);
  }

  /** Gateway group: `member`'s transaction put `token` into the group's counter of `actuator`. */
  onGroupCommitted(actuator: string, member: string, token: number): void {
    this.note(`group ${member} committed ${actuator} ${token}`);
    const h = this.of(actuator);
    if (!h.committed.has(token)) h.committedAbove.set(token, h.highestCommitted);
    h.highestCommitted = Math.max(h.highestCommitted, token);
    h.committed.set(token, member);
  }

  /**
   * A controller's token is its grant's, committed as it is; the gateway's own (a takeover
   * and the safe write it owes) may be covered by a higher one committed in the same step.
   */
  private inGroupCounter(h: ActuatorHistory, member: string, holder: string, token: number): boolean {
    if (holder !== GATEWAY_HOLDER) return h.committed.get(token) === member;
    return [...h.committed].some(([t, by]) => by === member && t >= token);
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
    this.auditDue = this.auditDue.filter((d) => d.epoch !== epoch);
    this.endLeasesOf(epoch); // every lease ends with the process
  }

  /** Gateway group: process `epoch` stood down; its leases ended. */
  onStandDown(epoch: number): void {
    this.note(`standDown ${epoch}`);
    this.endLeasesOf(epoch);
  }

  /** Process `epoch` was paused for `ms` (SIGSTOP, a long GC): its audit writer's lag runs on its own time. */
  onPaused(epoch: number, ms: number): void {
    this.note(`paused ${epoch} ${ms}`);
    for (const d of this.auditDue) if (d.epoch === epoch) d.dueMs += ms;
  }

  private endLeasesOf(epoch: number): void {
    for (const h of this.actuators.values()) {
      const lease = h.leases.get(epoch);
      if (lease !== undefined) this.endLease(h, lease, "other");
    }
  }

  /** A lease of process `epoch` ended early by the gateway's own decision (a device fence ahead of its own, a takeover). */
  onLeaseRevoked(actuator: string, token: number, epoch: number): void {
    const h = this.of(actuator);
    const lease = h.leases.get(epoch);
    if (lease?.token === token) this.endLease(h, lease, "other");
  }

  private endLease(h: ActuatorHistory, lease: LiveLease, by: "release" | "other"): void {
    // A lease past its expiry had ended by then, whatever came after.
    if (lease === h.newest) h.endedBy = this.clock() >= lease.expiresAtMs ? "other" : by;
    h.leases.delete(lease.epoch);
  }

  onReply(epoch: number, actuator: string, request: GatewayRequest, reply: OutboundReply): void {
    const h = this.of(actuator);
    const { journal, member } = this.process(epoch);
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
      const lease = h.leases.get(epoch);
      if (request.verb === "lease/release" && lease?.token === request.token) this.endLease(h, lease, "release");
      return;
    }
    const { holder, token, ttlMs } = reply.lease;
    if (this.journalOf(h, journal).grants.get(token) !== holder)
      this.violate(`${actuator}: lease ${token} for ${holder} replied without a durable grant to that holder`);
    if (member !== null && h.committed.get(token) !== member)
      this.violate(`${actuator}: lease ${token} for ${holder} replied by ${member} without its commit in the group's counter`);
    const live = this.liveLease(h, epoch);
    if (live !== null && live.token === token && live.holder === holder && live.epoch === epoch) {
      live.expiresAtMs = now + ttlMs; // a renewal, or the live holder's repeated acquire
      return;
    }
    if (request.verb === "lease/renew") this.violate(`${actuator}: renewed lease ${token} of ${holder}, which was not live`);
    if (live !== null)
      this.violate(
        `${actuator}: lease ${token} to ${holder} while lease ${live.token} of ${live.holder} is live for ${live.expiresAtMs - now} ms more`,
      );
    if (member === null && token <= h.highestReplied)
      this.violate(`${actuator}: token ${token} granted to ${holder} after token ${h.highestReplied} (granted twice, or going back)`);
    if (member !== null) this.checkGroupGrantOrder(actuator, h, holder, token);
    h.highestReplied = Math.max(h.highestReplied, token);
    const lease = { holder, token, epoch, expiresAtMs: now + ttlMs };
    h.leases.set(epoch, lease);
    h.newest = lease;
    h.endedBy = null;
    this.counts.grants++;
  }

  /**
   * In a group a reply can be late: a paused gateway answers a grant it committed before the
   * pause when it resumes, after the other gateway granted above it (harmless: the token is
   * stale, every command under it is refused). So grants are judged in the order the group
   * committed them, and a token is granted to one holder only.
   */
  private checkGroupGrantOrder(actuator: string, h: ActuatorHistory, holder: string, token: number): void {
    const above = h.committedAbove.get(token);
    if (above !== undefined && above >= token)
      this.violate(`${actuator}: token ${token} granted to ${holder}, committed after token ${above} (going back)`);
    const before = h.repliedTo.get(token);
    if (before !== undefined && before !== holder) this.violate(`${actuator}: token ${token} granted to ${holder} and to ${before}`);
    h.repliedTo.set(token, holder);
  }

  private checkApplied(actuator: string, h: ActuatorHistory, token: number, seq: number): void {
    if (!h.applied.has(key(token, seq)))
      this.violate(`${actuator}: "applied" replied for (${token}, ${seq}), which the device never applied`);
  }

  /** Rule 3's bound: no intent of a live process waits past the audit lag for its commit. */
  private checkAuditLag(): void {
    const now = this.clock();
    // Oldest first, but a pause moves its process's entries on: not sorted by due time then.
    if (!this.auditDue.some((d) => d.dueMs < now)) return;
    for (const late of this.auditDue.filter((d) => d.dueMs < now)) {
      this.violate(
        `${late.actuator}: the audit record of (${late.key.replace(":", ", ")}) was not durable ${this.auditLagMs} ms after its write (the audit lag)`,
      );
    }
    this.auditDue = this.auditDue.filter((d) => d.dueMs >= now);
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
    for (const lease of [...h.leases.values()]) this.endLease(h, lease, "other"); // it can only have run out by now
    if (h.endedBy !== "other" || h.lastApplied === null) return;
    const holder = h.sentFor.get(h.lastApplied.token);
    if (holder !== GATEWAY_HOLDER) {
      this.violate(
        `${actuator}: its lease ended (not released) and the device was left at ${holder ?? "an unknown holder"}'s ${show(h.lastApplied)}, not at the safe values`,
      );
    }
  }
}
