import type { Clock, Journal, JournalEntry, JournalWriter, Scheduler } from "./ports.ts";
import { isJournalWriter } from "./ports.ts";

export interface GroupCommitOptions {
  /** The longest a batch that finds the disk idle waits for other actuators' records (0: never). */
  readonly gatherMaxMs: number;
  /** Told of each batch's records once durable, before any of its callers resumes. */
  readonly onDurable?: ((entries: readonly JournalEntry[]) => void) | undefined;
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

/**
 * Batches the journal records that become ready in the same turn of the event loop into
 * one durable commit (group commit). Every caller's promise resolves only after the
 * commit that contains its records returned, i.e. after fsync: nobody replies early.
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
  }

  persist(entries: readonly JournalEntry[]): Promise<void> {
    if (this.failed !== null) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      if (this.waiting.length === 0) this.waitingSinceMs = this.clock.monotonicMs();
      this.waiting.push({ entries, resolve, reject });
      this.schedule();
    });
  }

  get pending(): number {
    return this.waiting.length;
  }

  /** Records handed over and not yet durable, and when the oldest of them was handed over (monotonic ms; null: none). */
  backlog(): { readonly records: number; readonly oldestAtMs: number | null } {
    const waiting = this.waiting.reduce((n, w) => n + w.entries.length, 0);
    const records = waiting + (this.inFlight ? this.inFlightRecords : 0);
    if (records === 0) return { records, oldestAtMs: null };
    return { records, oldestAtMs: this.inFlight ? this.inFlightSinceMs : this.waitingSinceMs };
  }

  /** Resolves once nothing is waiting or in flight (committed or failed): before closing the journal. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
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
    const batch = this.waiting;
    this.waiting = [];
    if (batch.length === 0) return this.notifyIdle();
    const entries = batch.flatMap((w) => w.entries);
    if (this.writer === null) {
      try {
        this.journal.commit(entries);
      } catch (err) {
        return this.fail(err, batch);
      }
      this.committed(batch, entries);
      return;
    }
    const gatherUntilMs = this.gatherUntilMs(batch);
    if (gatherUntilMs !== null) {
      this.waiting = batch;
      this.cancelGather ??= this.scheduler.at(gatherUntilMs, () => {
        this.cancelGather = null;
        this.flush();
      });
      return;
    }
    this.cancelGather?.();
    this.cancelGather = null;
    this.lastBatchActuators = actuatorsIn(batch);
    this.inFlight = true;
    this.inFlightRecords = entries.length;
    this.inFlightSinceMs = this.waitingSinceMs;
    const sentAtMs = this.clock.monotonicMs();
    let sent: Promise<void>;
    try {
      sent = this.writer.commitAsync(entries);
    } catch (err) {
      sent = Promise.reject(err);
    }
    sent.then(
      () => {
        const tookMs = this.clock.monotonicMs() - sentAtMs;
        this.syncEstimateMs += (tookMs - this.syncEstimateMs) * SYNC_EWMA_WEIGHT;
        this.inFlight = false;
        this.committed(batch, entries);
        if (this.waiting.length > 0) this.schedule();
        else this.notifyIdle();
      },
      (err: unknown) => {
        this.inFlight = false;
        this.fail(err, batch);
      },
    );
  }

  /** Until when `batch`, finding the disk idle, waits for more actuators' records; null: send now. */
  private gatherUntilMs(batch: readonly Waiter[]): number | null {
    const windowMs = Math.min(this.options.gatherMaxMs, this.syncEstimateMs / 2);
    if (windowMs < MIN_GATHER_MS || this.lastBatchActuators < 2 || actuatorsIn(batch) >= this.lastBatchActuators) return null;
    const untilMs = this.waitingSinceMs + windowMs;
    return this.clock.monotonicMs() < untilMs ? untilMs : null;
  }

  private committed(batch: readonly Waiter[], entries: readonly JournalEntry[]): void {
    this.commits++;
    this.entriesCommitted += entries.length;
    this.options.onDurable?.(entries);
    for (const w of batch) w.resolve();
  }

  private fail(err: unknown, batch: readonly Waiter[]): void {
    this.cancelGather?.();
    this.cancelGather = null;
    // Nothing after a failed commit may be trusted: refuse every later persist too,
    // including those that were waiting behind the failed batch.
    this.failed = err;
    const later = this.waiting;
    this.waiting = [];
    for (const w of batch) w.reject(err);
    for (const w of later) w.reject(err);
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
