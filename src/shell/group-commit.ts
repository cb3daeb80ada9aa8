import type { Journal, JournalEntry, Scheduler } from "./ports.ts";

/**
 * Batches the journal records that become ready in the same turn of the event loop into
 * one durable commit (group commit). Every caller's promise resolves only after the
 * commit that contains its records returned, i.e. after fsync: nobody replies early.
 */
export class GroupCommitter {
  private waiting: { entries: readonly JournalEntry[]; resolve: () => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;
  private failed: unknown = null;
  /** Figures for metrics and benchmarks. */
  commits = 0;
  entriesCommitted = 0;

  constructor(
    private readonly journal: Journal,
    private readonly scheduler: Scheduler,
  ) {}

  persist(entries: readonly JournalEntry[]): Promise<void> {
    if (this.failed !== null) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.waiting.push({ entries, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        this.scheduler.defer(() => this.flush());
      }
    });
  }

  get pending(): number {
    return this.waiting.length;
  }

  private flush(): void {
    this.scheduled = false;
    const batch = this.waiting;
    this.waiting = [];
    if (batch.length === 0) return;
    const entries = batch.flatMap((w) => w.entries);
    try {
      this.journal.commit(entries);
    } catch (err) {
      // Nothing after a failed commit may be trusted: refuse every later persist too.
      this.failed = err;
      for (const w of batch) w.reject(err);
      return;
    }
    this.commits++;
    this.entriesCommitted += entries.length;
    for (const w of batch) w.resolve();
  }
}
