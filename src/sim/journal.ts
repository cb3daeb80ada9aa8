/**
 * The simulated journal: the in-memory journal, with the process allowed to die at a
 * commit, either before the sync (the commit is lost, as if the power went before fsync
 * returned) or right after it (durable, but nothing the process meant to do next happens).
 * A restart reopens over exactly what was synced, the way the daemon reopens its file.
 */
import type { DurableSnapshot } from "../core/actuator.ts";
import { MemoryJournal } from "../adapters/journal/memory.ts";
import type { Journal, JournalEntry } from "../shell/ports.ts";

export type CommitCrash = "beforeSync" | "afterSync" | null;

export interface JournalHooks {
  /** Decides, per commit, whether the process dies at it. */
  crashAt(entries: readonly JournalEntry[]): CommitCrash;
  /** The entries are durable (the checker's record of the journal). */
  onDurable(entries: readonly JournalEntry[]): void;
  /** The process died here. */
  crash(): void;
}

/** Thrown out of a commit the process did not survive; nobody alive sees it. */
class SimCrash extends Error {
  constructor() {
    super("simulated process crash during a journal commit");
  }
}

export class SimJournal implements Journal {
  constructor(
    private readonly inner: MemoryJournal,
    private readonly hooks: JournalHooks,
  ) {}

  static open(recentLimit: number, hooks: JournalHooks): SimJournal {
    return new SimJournal(new MemoryJournal({ recentLimit }), hooks);
  }

  load(): ReadonlyMap<string, DurableSnapshot> {
    return this.inner.load();
  }

  commit(entries: readonly JournalEntry[]): void {
    const crash = entries.length > 0 ? this.hooks.crashAt(entries) : null;
    if (crash === "beforeSync") {
      this.hooks.crash();
      throw new SimCrash();
    }
    this.inner.commit(entries);
    this.hooks.onDurable(entries);
    if (crash === "afterSync") this.hooks.crash();
  }

  close(): void {
    this.inner.close();
  }

  /** The journal a restarted process opens: what was synced, nothing else. */
  reopen(hooks: JournalHooks = this.hooks): SimJournal {
    return new SimJournal(this.inner.crash(), hooks);
  }
}
