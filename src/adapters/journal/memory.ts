/**
 * The in-memory journal: the fold of {@link applyRecord} over committed entries, used by
 * tests and the seeded simulator. It models a crash with {@link MemoryJournal.crash}: the
 * journal returned sees exactly what was committed, as a restarted daemon would.
 */
import type { DurableSnapshot } from "../../core/actuator.ts";
import { EMPTY_SNAPSHOT } from "../../core/actuator.ts";
import { afterRestart, applyRecord } from "../../core/durable.ts";
import type { Journal, JournalEntry } from "../../shell/ports.ts";
import { assertRecentLimit, assertStorable } from "./records.ts";

export interface MemoryJournalOptions {
  readonly recentLimit: number;
}

type Snapshots = ReadonlyMap<string, DurableSnapshot>;

/** Folds entries into snapshots, as every journal must; the reference the contract tests use. */
export function foldEntries(snapshots: Snapshots, entries: readonly JournalEntry[], recentLimit: number): Map<string, DurableSnapshot> {
  const next = new Map(snapshots);
  for (const { actuator, record } of entries) {
    next.set(actuator, applyRecord(next.get(actuator) ?? EMPTY_SNAPSHOT, record, recentLimit));
  }
  return next;
}

/** What a restart makes of the committed snapshots (see {@link afterRestart}). */
export function restartAll(snapshots: Snapshots): Map<string, DurableSnapshot> {
  return new Map([...snapshots].map(([id, snapshot]) => [id, afterRestart(snapshot)]));
}

export class MemoryJournal implements Journal {
  readonly recentLimit: number;
  /** True when this journal started empty rather than over a crashed one's commits. */
  readonly fresh: boolean;
  /** How many non-empty commits this instance made (one per durable step). */
  commitCount = 0;
  #durable: Snapshots;
  #loaded = false;
  #gone: "closed" | "crashed" | null = null;

  constructor(options: MemoryJournalOptions, durable?: Snapshots) {
    assertRecentLimit(options.recentLimit);
    this.recentLimit = options.recentLimit;
    this.fresh = durable === undefined;
    this.#durable = durable ?? new Map();
  }

  load(): ReadonlyMap<string, DurableSnapshot> {
    this.#assertUsable("load");
    this.#durable = restartAll(this.#durable);
    this.#loaded = true;
    return this.#durable;
  }

  commit(entries: readonly JournalEntry[]): void {
    this.#assertUsable("commit");
    if (!this.#loaded) throw new Error("journal: commit() before load(); load() checks the journal and must come first");
    assertStorable(entries);
    if (entries.length === 0) return;
    // Built aside and swapped in: all or nothing, like the real one.
    this.#durable = foldEntries(this.#durable, entries, this.recentLimit);
    this.commitCount += 1;
  }

  close(): void {
    if (this.#gone === null) this.#gone = "closed";
  }

  /**
   * The process died: returns a new journal over everything committed (and nothing else),
   * and makes this one unusable. Works on a closed journal too (a clean restart).
   */
  crash(): MemoryJournal {
    this.#gone = "crashed";
    return new MemoryJournal({ recentLimit: this.recentLimit }, this.#durable);
  }

  #assertUsable(op: string): void {
    if (this.#gone !== null) throw new Error(`journal: ${op}() on a ${this.#gone} journal`);
  }
}
