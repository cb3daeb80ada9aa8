/** The JournalError a journal's open and load refuse `file` with (the test fails if they do not). */
import { expect } from "vitest";
import { openSqliteJournal, type SqliteJournal } from "../../src/adapters/journal/sqlite.ts";
import { JournalError } from "../../src/shell/ports.ts";

export function refusal(file: string, recentLimit = 100): JournalError {
  let journal: SqliteJournal | undefined;
  try {
    journal = openSqliteJournal({ path: file, recentLimit, busyTimeoutMs: 50 });
    journal.load();
  } catch (error) {
    expect(error).toBeInstanceOf(JournalError);
    return error as JournalError;
  } finally {
    journal?.close();
  }
  throw new Error(`expected ${file} to be refused`);
}

/** Opens `file` as the daemon would and checks that nothing is lost: `actuator`'s highest grant is `highestGranted`. */
export function expectOpensWhole(file: string, actuator: string, highestGranted: number): void {
  const journal = openSqliteJournal({ path: file, recentLimit: 8 });
  try {
    expect(journal.load().get(actuator)?.highestGranted).toBe(highestGranted);
    expect(journal.lostHistory).toBeNull();
  } finally {
    journal.close();
  }
}
