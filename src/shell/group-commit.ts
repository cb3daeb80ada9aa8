import type { Journal, JournalEntry, JournalWriter, Scheduler } from "./ports.ts";
import { isJournalWriter } from "./ports.ts";

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
 */
export class GroupCommitter {
  private waiting: Waiter[] = [];
  private scheduled = false;
  private failed: unknown = null;
  private readonly writer: JournalWriter | null;
  private inFlight = false;
  private idleWaiters: (() => void)[] = [];
  /** Figures for metrics and benchmarks. */
  commits = 0;
  entriesCommitted = 0;

  constructor(
    private readonly journal: Journal,
    private readonly scheduler: Scheduler,
  ) {
    this.writer = isJournalWriter(journal) ? journal : null;
  }

  persist(entries: readonly JournalEntry[]): Promise<void> {
    if (this.failed !== null) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.waiting.push({ entries, resolve, reject });
      this.schedule();
    });
  }

  get pending(): number {
    return this.waiting.length;
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
      this.committed(batch, entries.length);
      return;
    }
    this.inFlight = true;
    let sent: Promise<void>;
    try {
      sent = this.writer.commitAsync(entries);
    } catch (err) {
      sent = Promise.reject(err);
    }
    sent.then(
      () => {
        this.inFlight = false;
        this.committed(batch, entries.length);
        if (this.waiting.length > 0) this.schedule();
        else this.notifyIdle();
      },
      (err: unknown) => {
        this.inFlight = false;
        this.fail(err, batch);
      },
    );
  }

  private committed(batch: readonly Waiter[], entries: number): void {
    this.commits++;
    this.entriesCommitted += entries;
    for (const w of batch) w.resolve();
  }

  private fail(err: unknown, batch: readonly Waiter[]): void {
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
