/**
 * The small interfaces the shell talks to. Each has a real adapter (src/adapters) and an
 * in-memory or simulated one, so the same core and pipeline run in the daemon, the tests
 * and the seeded simulator.
 */
import type { DurableSnapshot } from "../core/actuator.ts";
import type { JournalRecord } from "../core/types.ts";

export interface JournalEntry {
  readonly actuator: string;
  readonly record: JournalRecord;
}

export interface Journal {
  /**
   * Reads every actuator's durable state. Intents that never got an outcome are recorded
   * (durably) as OUTCOME_UNKNOWN and returned so. Throws {@link JournalError} when the
   * journal cannot be read or is inconsistent: the daemon must not start on a guess.
   */
  load(): ReadonlyMap<string, DurableSnapshot>;
  /** One atomic, durable commit of all entries, in order. Returns only once they are synced. */
  commit(entries: readonly JournalEntry[]): void;
  close(): void;
}

export class JournalError extends Error {
  override readonly name = "JournalError";
  constructor(
    readonly code: "JOURNAL_UNREADABLE" | "JOURNAL_INCONSISTENT" | "JOURNAL_NEWER_VERSION",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${code}: ${message}`, options);
  }
}
