/**
 * The SQLite journal behind its worker thread (src/adapters/journal/worker.ts): the same
 * contract as the in-thread one, then what only the worker has: pipelined commits,
 * acknowledged in order, a failure that rejects its batch and every later one, the lock held
 * by the worker for the journal's whole life, and close() flushing what was posted.
 */
import Database from "better-sqlite3";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openSqliteJournal } from "../../src/adapters/journal/sqlite.ts";
import { openWorkerJournal, type WorkerJournal } from "../../src/adapters/journal/worker.ts";
import type { JournalEntry } from "../../src/shell/ports.ts";
import { JournalError } from "../../src/shell/ports.ts";
import { journalContract, type JournalStore } from "./contract.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-wjournal-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let files = 0;
const newPath = (): string => path.join(root, `j${++files}.db`);

function workerStore(recentLimit: number): JournalStore {
  const file = newPath();
  return {
    open: () => openWorkerJournal({ path: file, recentLimit }),
    dispose: () => {
      for (const suffix of ["", "-wal", "-shm"]) fs.rmSync(file + suffix, { force: true });
    },
  };
}

// Every open starts a worker (~0.1 s from source, more when the machine is loaded); the
// SQLite fold itself is checked with 200 runs in sqlite.test.ts, this checks the worker
// carries it faithfully.
journalContract("sqlite in a worker thread", workerStore, { propertyRuns: 6 });

const grant = (actuator: string, token: number): JournalEntry => ({ actuator, record: { type: "granted", holder: "ctl-a", token } });
const intent = (actuator: string, token: number, seq: number): JournalEntry => ({
  actuator,
  record: { type: "intent", holder: "ctl-a", token, seq, set: { position: seq } },
});

function started(file = newPath()): { file: string; journal: WorkerJournal } {
  const journal = openWorkerJournal({ path: file, recentLimit: 1000 });
  journal.load();
  journal.commit([grant("v1", 1)]);
  return { file, journal };
}

/** What is on disk, read after the worker closed it. */
function seqsOnDisk(file: string): number[] {
  const j = openSqliteJournal({ path: file, recentLimit: 1000 });
  try {
    return (j.load().get("v1")?.recent ?? []).map((r) => r.seq);
  } finally {
    j.close();
  }
}

describe("WorkerJournal", () => {
  it("pipelines commits and acknowledges them in the order they were posted", async () => {
    const { file, journal } = started();
    const acks: number[] = [];
    const all = Array.from({ length: 200 }, (_, seq) => journal.commitAsync([intent("v1", 1, seq)]).then(() => acks.push(seq)));
    expect(journal.inFlight).toBe(200);
    await Promise.all(all);
    expect(acks).toEqual(Array.from({ length: 200 }, (_, i) => i));
    journal.close();
    expect(seqsOnDisk(file)).toEqual(acks);
  });

  it("a failed commit rejects its batch and every later one; earlier ones stay committed", async () => {
    const file = newPath();
    openWorkerJournal({ path: file, recentLimit: 1000 }).close(); // create it
    // A real SQLite error inside the worker's transaction, at the 13th intent.
    const db = new Database(file);
    db.exec("CREATE TRIGGER fail13 BEFORE INSERT ON commands WHEN NEW.seq = 13 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
    db.close();
    const { journal } = started(file);
    const results: { seq: number; ok: boolean; error?: string }[] = [];
    const all = Array.from({ length: 30 }, (_, seq) =>
      journal.commitAsync([intent("v1", 1, seq)]).then(
        () => results.push({ seq, ok: true }),
        (e: unknown) => results.push({ seq, ok: false, error: (e as Error).message }),
      ),
    );
    await Promise.all(all);
    expect(results.map((r) => r.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i)); // settled in order
    expect(results.filter((r) => r.ok).map((r) => r.seq)).toEqual(Array.from({ length: 13 }, (_, i) => i));
    for (const r of results.slice(13)) expect(r.error).toMatch(/injected failure/);
    // Poisoned: every later commit is refused without reaching the disk.
    await expect(journal.commitAsync([intent("v1", 1, 40)])).rejects.toThrow(/injected failure/);
    expect(journal.problem()).toMatch(/injected failure/);
    journal.close();
    const check = new Database(file);
    check.exec("DROP TRIGGER fail13");
    check.close();
    expect(seqsOnDisk(file)).toEqual(Array.from({ length: 13 }, (_, i) => i));
  });

  it("close() lets every posted commit finish and settles it before returning", async () => {
    const { file, journal } = started();
    const settled: number[] = [];
    const all = Array.from({ length: 50 }, (_, seq) => journal.commitAsync([intent("v1", 1, seq)]).then(() => settled.push(seq)));
    journal.close();
    await Promise.all(all);
    expect(settled).toHaveLength(50);
    expect(seqsOnDisk(file)).toEqual(settled);
    await expect(journal.commitAsync([intent("v1", 1, 99)])).rejects.toThrow(/closed/);
  });

  it("holds the exclusive lock in the worker from open to close", () => {
    const { file, journal } = started();
    let refused: unknown = null;
    try {
      openSqliteJournal({ path: file, recentLimit: 10, busyTimeoutMs: 50 }).load();
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(JournalError);
    expect((refused as JournalError).message).toMatch(/in use by another process/);
    expect(() => openWorkerJournal({ path: file, recentLimit: 10, busyTimeoutMs: 50 }).load()).toThrow(/in use by another process/);
    expect(journal.settings()).toMatchObject({ journalMode: "wal", synchronous: 2, lockingMode: "exclusive" });
    journal.close();
    const again = openSqliteJournal({ path: file, recentLimit: 10 });
    again.load();
    again.close();
  });

  it("reports open failures as the in-thread journal does, with the same class and message", () => {
    const file = newPath();
    fs.writeFileSync(file, "not a database at all, just some text that is long enough to be a header...");
    let viaWorker: unknown = null;
    let direct: unknown = null;
    try {
      openWorkerJournal({ path: file, recentLimit: 4 }).load();
    } catch (e) {
      viaWorker = e;
    }
    try {
      openSqliteJournal({ path: file, recentLimit: 4 }).load();
    } catch (e) {
      direct = e;
    }
    expect(viaWorker).toBeInstanceOf(JournalError);
    expect((viaWorker as JournalError).code).toBe((direct as JournalError).code);
    expect((viaWorker as JournalError).message).toBe((direct as JournalError).message);
  });
});
