import type { Clock, Journal, JournalEntry, JournalWriter, Scheduler } from "./ports.ts";
import { isJournalWriter } from "./ports.ts";

/** How far the asynchronous audit trail (commands' records) may lag behind, and how long a commit may take. */
export interface AuditBounds {
  /** An audit record waits at most this long for a commit to carry it. */
  readonly lagMs: number;
  /** This many audit records waiting start a commit at once. */
  readonly lagRecords: number;
  /**
   * Records waiting (not yet durable) at which new commands are refused (see
   * {@link GroupCommitter.saturatedFor}); each actuator's share of it is the limit for its own.
   */
  readonly queueLimit: number;
  /** A commit not durable this long after it was sent is a stalled disk: fatal. */
  readonly stallMs: number;
}

/** The configuration's defaults (src/config/schema.ts, journal.*): tests and the simulator run with them. */
export const DEFAULT_AUDIT_BOUNDS: AuditBounds = { lagMs: 200, lagRecords: 256, queueLimit: 8192, stallMs: 10_000 };

export interface GroupCommitOptions {
  /** The longest a batch that finds the disk idle waits for other actuators' records (0: never). */
  readonly gatherMaxMs: number;
  /** Told of each batch's records once durable, before any of its callers resumes. */
  readonly onDurable?: ((entries: readonly JournalEntry[]) => void) | undefined;
  readonly audit?: AuditBounds | undefined;
  /**
   * Told once when a commit fails or stalls. Nobody waits for an audit record, so this is
   * how its failure stops the daemon (fail-stop: nothing more is decided).
   */
  readonly onFailure?: ((err: unknown) => void) | undefined;
  /** The actuators sharing the audit queue: each may hold queueLimit / actuators of it (default 1). */
  readonly actuators?: number | undefined;
}

/** A commit sent to the journal has not come back within `stallMs`. */
export class JournalStallError extends Error {
  override readonly name = "JournalStallError";
  constructor(stallMs: number, records: number) {
    super(
      `a journal commit of ${records} record(s) has not become durable within ${stallMs} ms (journal.commitStallMs): the disk has stalled. The gateway stops rather than go on with a journal it cannot write; check the disk (dmesg, free space), then restart.`,
    );
  }
}

/** Weight of the newest sync in the running estimate of the sync time. */
const SYNC_EWMA_WEIGHT = 0.2;
/**
 * The shortest wait worth taking: timers fire no sooner than 1 ms (and the daemon's clock
 * counts whole milliseconds), so a shorter window would wait a whole millisecond for
 * records a sub-millisecond sync would have carried in the next batch anyway.
 */
const MIN_GATHER_MS = 1;

interface Waiter {
  readonly entries: readonly JournalEntry[];
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

const nobody = (): void => {};

/**
 * Batches the journal records that become ready in the same turn of the event loop into
 * one durable commit (group commit). Every caller's promise resolves only after the
 * commit that contains its records returned, i.e. after fsync: nobody replies early.
 *
 * Two kinds of record share one ordered stream. A grant (`persist`) is committed at once
 * and its caller waits. A command's audit record (`audit`) is queued and nobody waits: it
 * goes with the next commit, which a grant starts, or `lagRecords` audit records waiting,
 * or the oldest having waited `lagMs`, whichever comes first. Records are never reordered,
 * so a grant's commit carries every audit record queued before it, and the journal folds
 * them in the order the core decided them. A commit that fails, or is not durable within
 * `stallMs`, is fatal (`onFailure`): an audit trail that cannot be written stops the daemon
 * as a grant that cannot would.
 *
 * With a {@link JournalWriter} (the SQLite journal) the commit's fsync runs off the event
 * loop: one batch is in flight at a time; what becomes ready meanwhile accumulates and goes
 * as the next single transaction once the previous one is durable. Batches are never
 * reordered. With a plain {@link Journal} (the in-memory
 * one of the tests and the simulator) the commit runs synchronously, as it always did.
 *
 * Gathering: with one sync at a time, a record that finds the disk idle goes alone, and the
 * records of other actuators arriving a moment later wait for that whole sync and then
 * their own. When the last batch carried several actuators (so others are busy too), a
 * batch that finds the disk idle waits a little for them: until it holds as many actuators
 * as the last one, or half the recent sync time, at most `gatherMaxMs`. With one busy
 * actuator nothing waits, nor on a fast disk (a sync under 2 ms: the wait would be shorter
 * than a timer can be); on an SD card's 5 ms it is what lets the actuators share syncs
 * (npm run bench, the slow-disk scale-out).
 */
export class GroupCommitter {
  private waiting: Waiter[] = [];
  private scheduled = false;
  private failed: unknown = null;
  private readonly writer: JournalWriter | null;
  private inFlight = false;
  private idleWaiters: (() => void)[] = [];
  /** Running estimate of one commit's duration (write and sync), ms. */
  private syncEstimateMs = 0;
  /** Actuators in the last batch sent; more than one means others are busy too. */
  private lastBatchActuators = 0;
  /** When the oldest waiting record arrived (monotonic ms). */
  private waitingSinceMs = 0;
  /** Records in the batch being committed, and when the oldest of them arrived. */
  private inFlightRecords = 0;
  private inFlightSinceMs = 0;
  private cancelGather: (() => void) | null = null;
  private readonly bounds: AuditBounds;
  /** Records in `waiting` (all kinds); of them audit records, and when the oldest of those arrived. */
  private waitingRecords = 0;
  private auditWaiting = 0;
  private auditSinceMs = 0;
  /** A grant is in `waiting`: its caller waits, so the next flush goes at once. */
  private grantWaiting = false;
  /** Stopping: everything waiting goes now, whatever the lag. */
  private urgent = false;
  private cancelLag: (() => void) | null = null;
  private cancelStall: (() => void) | null = null;
  /** Records handed over so far, and how many of them are durable; who waits for a count. */
  private handedRecords = 0;
  private durableRecords = 0;
  private durableWaiters: { readonly upTo: number; readonly resolve: () => void }[] = [];
  /** Per actuator, its records handed over and not yet durable (waiting or in flight). */
  private readonly undurable = new Map<string, number>();
  /** Figures for metrics and benchmarks. */
  commits = 0;
  entriesCommitted = 0;

  constructor(
    private readonly journal: Journal,
    private readonly scheduler: Scheduler,
    private readonly clock: Clock,
    private readonly options: GroupCommitOptions = { gatherMaxMs: 0 },
  ) {
    this.writer = isJournalWriter(journal) ? journal : null;
    this.bounds = options.audit ?? DEFAULT_AUDIT_BOUNDS;
  }

  /** A grant: resolves once it (and everything queued before it) is durable. */
  persist(entries: readonly JournalEntry[]): Promise<void> {
    if (this.failed !== null) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.enqueue({ entries, resolve, reject });
      this.grantWaiting = true;
      this.schedule();
    });
  }

  /**
   * A command's audit record: queued in order, committed within the lag bounds; nobody
   * waits. After a failure it is dropped: the daemon is stopping already.
   */
  audit(entries: readonly JournalEntry[]): void {
    if (this.failed !== null || entries.length === 0) return;
    if (this.auditWaiting === 0) this.auditSinceMs = this.clock.monotonicMs();
    this.enqueue({ entries, resolve: nobody, reject: nobody });
    this.auditWaiting += entries.length;
    if (this.auditWaiting >= this.bounds.lagRecords) this.schedule();
    else this.armLag();
  }

  private enqueue(waiter: Waiter): void {
    if (this.waiting.length === 0) this.waitingSinceMs = this.clock.monotonicMs();
    this.waiting.push(waiter);
    this.count(waiter.entries, 1);
    this.waitingRecords += waiter.entries.length;
    this.handedRecords += waiter.entries.length;
  }

  /**
   * Resolves once every record handed over before this call is durable (within the audit
   * lag, without forcing a commit): a reader of the journal file (the audit trail) answers
   * after this, so it shows the newest commands, and never a record a crash could still
   * take back. Never rejects: after a failure it resolves, and the daemon is stopping.
   */
  whenDurable(): Promise<void> {
    const upTo = this.handedRecords;
    if (this.durableRecords >= upTo || this.failed !== null) return Promise.resolve();
    return new Promise((resolve) => this.durableWaiters.push({ upTo, resolve }));
  }

  /**
   * Records not yet durable have reached `queueLimit`: the disk is slower than the commands,
   * and the gateway refuses new ones (OVERLOADED) until it catches up, so that neither the
   * memory they take nor what a crash could lose grows without bound.
   */
  get saturated(): boolean {
    return this.waitingRecords + (this.inFlight ? this.inFlightRecords : 0) >= this.bounds.queueLimit;
  }

  /**
   * Whether `actuator`'s next command is refused: the queue is full, or this actuator holds
   * its share of it already. A controller flooding one actuator on a slow disk fills its own
   * share and is refused first; the other actuators' commands go on (docs/deploy.md, the
   * audit trail).
   */
  saturatedFor(actuator: string): boolean {
    return this.saturated || (this.undurable.get(actuator) ?? 0) >= this.share;
  }

  /** The records one actuator may have not yet durable: an equal share of queueLimit, at least one. */
  get share(): number {
    return Math.max(1, Math.floor(this.bounds.queueLimit / Math.max(1, this.options.actuators ?? 1)));
  }

  /** Why commands are refused now (the queue full, or actuators at their share), for /healthz; null when none is. */
  saturation(): string | null {
    const { records } = this.backlog();
    if (this.saturated)
      return `the journal is ${records} records behind (journal.auditQueueLimit ${this.bounds.queueLimit}): the disk is slower than the commands, and every command is refused (OVERLOADED) until it catches up`;
    const full = [...this.undurable].filter(([, n]) => n >= this.share).map(([actuator]) => actuator);
    if (full.length === 0) return null;
    return `the journal is ${records} records behind: ${full.sort().join(", ")} ${full.length === 1 ? "holds its" : "hold their"} share of journal.auditQueueLimit (${this.share} records each), and ${full.length === 1 ? "its" : "their"} commands are refused (OVERLOADED) until the disk catches up`;
  }

  /** Records not yet durable of `actuator` (its use of its share). */
  backlogOf(actuator: string): number {
    return this.undurable.get(actuator) ?? 0;
  }

  private count(entries: readonly JournalEntry[], delta: 1 | -1): void {
    for (const { actuator } of entries) {
      const n = (this.undurable.get(actuator) ?? 0) + delta;
      if (n === 0) this.undurable.delete(actuator);
      else this.undurable.set(actuator, n);
    }
  }

  /** Records handed over and not yet durable, and when the oldest of them was handed over (monotonic ms; null: none). */
  backlog(): { readonly records: number; readonly oldestAtMs: number | null } {
    const records = this.waitingRecords + (this.inFlight ? this.inFlightRecords : 0);
    if (records === 0) return { records, oldestAtMs: null };
    return { records, oldestAtMs: this.inFlight ? this.inFlightSinceMs : this.waitingSinceMs };
  }

  /** Commits everything waiting now, and resolves once nothing is waiting or in flight (committed or failed): before closing the journal. */
  idle(): Promise<void> {
    this.urgent = true;
    if (this.waiting.length > 0) this.schedule();
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Whether what is waiting should be committed now rather than gather more audit records. */
  private due(): boolean {
    if (this.grantWaiting || this.urgent || this.auditWaiting >= this.bounds.lagRecords) return true;
    return this.clock.monotonicMs() >= this.auditSinceMs + this.bounds.lagMs;
  }

  /** Audit records waiting: a commit once the oldest has waited `lagMs`. */
  private armLag(): void {
    if (this.cancelLag !== null) return;
    this.cancelLag = this.scheduler.at(this.auditSinceMs + this.bounds.lagMs, () => {
      this.cancelLag = null;
      if (this.waiting.length > 0) this.schedule();
    });
  }

  /** Takes everything waiting, as the next batch. */
  private take(): Waiter[] {
    const batch = this.waiting;
    this.waiting = [];
    this.waitingRecords = 0;
    this.auditWaiting = 0;
    this.grantWaiting = false;
    this.cancelLag?.();
    this.cancelLag = null;
    return batch;
  }

  private isIdle(): boolean {
    return !this.inFlight && (this.waiting.length === 0 || this.failed !== null);
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    this.scheduler.defer(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    // One in flight at a time: the rest go together when it is acknowledged.
    if (this.inFlight || this.failed !== null) return;
    if (this.waiting.length === 0) return this.notifyIdle();
    if (!this.due()) return this.armLag(); // audit records only, within their lag
    if (this.writer === null) {
      const batch = this.take();
      const entries = batch.flatMap((w) => w.entries);
      try {
        this.journal.commit(entries);
      } catch (err) {
        return this.fail(err, batch);
      }
      this.committed(batch, entries);
      return this.notifyIdle();
    }
    // Gathering is for grants, whose callers wait; audit records have waited their lag already.
    const gatherUntilMs = this.grantWaiting && !this.urgent ? this.gatherUntilMs(this.waiting) : null;
    if (gatherUntilMs !== null) {
      this.cancelGather ??= this.scheduler.at(gatherUntilMs, () => {
        this.cancelGather = null;
        this.flush();
      });
      return;
    }
    this.cancelGather?.();
    this.cancelGather = null;
    const batch = this.take();
    const entries = batch.flatMap((w) => w.entries);
    this.lastBatchActuators = actuatorsIn(batch);
    this.inFlight = true;
    this.inFlightRecords = entries.length;
    this.inFlightSinceMs = this.waitingSinceMs;
    const sentAtMs = this.clock.monotonicMs();
    const stallMs = this.bounds.stallMs;
    this.cancelStall = this.scheduler.at(sentAtMs + stallMs, () => {
      this.cancelStall = null;
      this.inFlight = false;
      this.fail(new JournalStallError(stallMs, entries.length), batch);
    });
    let sent: Promise<void>;
    try {
      sent = this.writer.commitAsync(entries);
    } catch (err) {
      sent = Promise.reject(err);
    }
    sent.then(
      () => {
        if (this.failed !== null) return; // stalled: given up on already
        this.cancelStall?.();
        this.cancelStall = null;
        const tookMs = this.clock.monotonicMs() - sentAtMs;
        this.syncEstimateMs += (tookMs - this.syncEstimateMs) * SYNC_EWMA_WEIGHT;
        this.inFlight = false;
        this.committed(batch, entries);
        if (this.waiting.length > 0) this.schedule();
        else this.notifyIdle();
      },
      (err: unknown) => {
        if (this.failed !== null) return;
        this.cancelStall?.();
        this.cancelStall = null;
        this.inFlight = false;
        this.fail(err, batch);
      },
    );
  }

  /** Until when the records waiting, finding the disk idle, wait for more actuators' records; null: send now. */
  private gatherUntilMs(batch: readonly Waiter[]): number | null {
    const windowMs = Math.min(this.options.gatherMaxMs, this.syncEstimateMs / 2);
    if (windowMs < MIN_GATHER_MS || this.lastBatchActuators < 2 || actuatorsIn(batch) >= this.lastBatchActuators) return null;
    const untilMs = this.waitingSinceMs + windowMs;
    return this.clock.monotonicMs() < untilMs ? untilMs : null;
  }

  private committed(batch: readonly Waiter[], entries: readonly JournalEntry[]): void {
    this.commits++;
    this.entriesCommitted += entries.length;
    this.durableRecords += entries.length;
    this.count(entries, -1);
    this.options.onDurable?.(entries);
    for (const w of batch) w.resolve();
    while (this.durableWaiters.length > 0 && this.durableWaiters[0]!.upTo <= this.durableRecords) this.durableWaiters.shift()!.resolve();
  }

  private fail(err: unknown, batch: readonly Waiter[]): void {
    this.cancelGather?.();
    this.cancelGather = null;
    // Nothing after a failed commit may be trusted: refuse every later persist too,
    // including those that were waiting behind the failed batch.
    this.failed = err;
    const later = this.take();
    for (const w of batch) w.reject(err);
    for (const w of later) w.reject(err);
    for (const w of this.durableWaiters.splice(0)) w.resolve();
    this.options.onFailure?.(err);
    this.notifyIdle();
  }

  private notifyIdle(): void {
    if (!this.isIdle()) return;
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }
}

function actuatorsIn(batch: readonly Waiter[]): number {
  return new Set(batch.flatMap((w) => w.entries.map((e) => e.actuator))).size;
}
