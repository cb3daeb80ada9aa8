/**
 * The SQLite journal's asynchronous commits (commitAsync): written at once, counted only
 * after an fdatasync of the -wal file that started after them, settled in order, and
 * poisoned by the first failure. The fdatasync is replaced here where a test must hold it
 * back or fail it; the others run the real one.
 */
import Database from "better-sqlite3";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openSqliteJournal, type SqliteJournal, type SqliteJournalOptions } from "../../../src/adapters/journal/sqlite.ts";
import type { JournalEntry } from "../../../src/shell/ports.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-ajournal-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let files = 0;
const newPath = (): string => path.join(root, `j${++files}.db`);

const grant = (actuator: string, token: number): JournalEntry => ({ actuator, record: { type: "granted", holder: "ctl-a", token } });
const intent = (actuator: string, token: number, seq: number): JournalEntry => ({
  actuator,
  record: { type: "intent", holder: "ctl-a", token, seq, set: { position: seq } },
});

function started(file = newPath(), options: Partial<SqliteJournalOptions> = {}): { file: string; journal: SqliteJournal } {
  const journal = openSqliteJournal({ path: file, recentLimit: 1000, ...options });
  journal.load();
  journal.commit([grant("v1", 1)]);
  return { file, journal };
}

/** What is on disk, read after the journal was closed. */
function seqsOnDisk(file: string): number[] {
  const j = openSqliteJournal({ path: file, recentLimit: 1000 });
  try {
    return (j.load().get("v1")?.recent ?? []).map((r) => r.seq);
  } finally {
    j.close();
  }
}

/** An fdatasync that waits until the test lets it run (or fails it). */
function heldSync() {
  const held: { fd: number; callback: (err: NodeJS.ErrnoException | null) => void }[] = [];
  return {
    held,
    fdatasync: (fd: number, callback: (err: NodeJS.ErrnoException | null) => void) => held.push({ fd, callback }),
    release(err: NodeJS.ErrnoException | null = null) {
      const next = held.shift();
      if (!next) throw new Error("no fdatasync is waiting");
      if (err === null) fs.fdatasyncSync(next.fd);
      next.callback(err);
    },
  };
}

const settledYet = async (p: Promise<unknown>): Promise<boolean> => {
  let settled = false;
  void p.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
};

describe("SqliteJournal.commitAsync", () => {
  it("settles many commits in the order they were made, with the real fdatasync", async () => {
    const { file, journal } = started();
    const acks: number[] = [];
    const all = Array.from({ length: 200 }, (_, seq) => journal.commitAsync([intent("v1", 1, seq)]).then(() => acks.push(seq)));
    await Promise.all(all);
    expect(acks).toEqual(Array.from({ length: 200 }, (_, i) => i));
    expect(journal.unsynced).toBe(0);
    journal.close();
    expect(seqsOnDisk(file)).toEqual(acks);
  });

  it("resolves a commit only after an fdatasync of the -wal file that started after it", async () => {
    const sync = heldSync();
    const { file, journal } = started(newPath(), { fdatasync: sync.fdatasync });
    const first = journal.commitAsync([intent("v1", 1, 0)]);
    expect(sync.held).toHaveLength(1);
    expect(fs.fstatSync(sync.held[0]!.fd).ino).toBe(fs.statSync(`${file}-wal`).ino);
    // Written while the first sync runs: it waits for a second one, which starts only then.
    const second = journal.commitAsync([intent("v1", 1, 1)]);
    expect(sync.held).toHaveLength(1);
    expect(await settledYet(first)).toBe(false);
    sync.release();
    await first;
    expect(await settledYet(second)).toBe(false);
    expect(sync.held).toHaveLength(1);
    sync.release();
    await second;
    expect(journal.unsynced).toBe(0);
    journal.close();
  });

  it("a failed fdatasync rejects every commit waiting for it and every later one", async () => {
    const sync = heldSync();
    const { file, journal } = started(newPath(), { fdatasync: sync.fdatasync });
    const durable = journal.commitAsync([intent("v1", 1, 0)]);
    sync.release();
    await durable;
    const lost = [journal.commitAsync([intent("v1", 1, 1)]), journal.commitAsync([intent("v1", 1, 2)])];
    sync.release(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" }));
    for (const p of lost) await expect(p).rejects.toThrow(/could not be synced to disk \(EIO.*Check the disk, then restart/);
    await expect(journal.commitAsync([intent("v1", 1, 3)])).rejects.toThrow(/could not be synced/);
    expect(() => journal.commit([intent("v1", 1, 3)])).toThrow(/could not be synced/);
    expect(journal.problem()).toMatch(/could not be synced/);
    journal.close();
    expect(seqsOnDisk(file)[0]).toBe(0);
  });

  it("a failed write rejects its commit and every later one; earlier ones stay committed", async () => {
    const file = newPath();
    openSqliteJournal({ path: file, recentLimit: 1000 }).close(); // create it
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
    expect(results.filter((r) => r.ok).map((r) => r.seq)).toEqual(Array.from({ length: 13 }, (_, i) => i));
    for (const r of results.filter((r) => !r.ok)) expect(r.error).toMatch(/injected failure/);
    expect(results.filter((r) => !r.ok)).toHaveLength(17);
    expect(journal.problem()).toMatch(/injected failure/);
    journal.close();
    const check = new Database(file);
    check.exec("DROP TRIGGER fail13");
    check.close();
    expect(seqsOnDisk(file)).toEqual(Array.from({ length: 13 }, (_, i) => i));
  });

  it("close() syncs what was written and settles every waiting commit before returning", async () => {
    const sync = heldSync();
    const { file, journal } = started(newPath(), { fdatasync: sync.fdatasync });
    const settled: number[] = [];
    const all = Array.from({ length: 50 }, (_, seq) => journal.commitAsync([intent("v1", 1, seq)]).then(() => settled.push(seq)));
    expect(sync.held).toHaveLength(1); // one on the pool, the rest wait behind it
    journal.close();
    await Promise.all(all);
    expect(settled).toEqual(Array.from({ length: 50 }, (_, i) => i));
    sync.release(); // the pool's sync returns after close: its descriptor is closed then, nothing else happens
    expect(seqsOnDisk(file)).toEqual(settled);
    await expect(journal.commitAsync([intent("v1", 1, 99)])).rejects.toThrow(/closed/);
  });

  it("reports a stalled disk while an fdatasync has not returned for too long", async () => {
    const sync = heldSync();
    const { journal } = started(newPath(), { fdatasync: sync.fdatasync, syncStallMs: 20 });
    const commit = journal.commitAsync([intent("v1", 1, 0)]);
    expect(journal.problem()).toBeNull();
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(journal.problem()).toMatch(/fdatasync of .*-wal has not returned for \d+ s: the disk has stalled/);
    sync.release();
    await commit;
    expect(journal.problem()).toBeNull();
    journal.close();
  });

  // Adapted: the single-writer lock is a flock on the database file (its inode),
  // which SQLite's WAL locking for readers does not meet; a second opener is still refused.
  it("runs WAL with synchronous=NORMAL and its own fdatasync of the -wal, under the exclusive writer lock", () => {
    const { file, journal } = started();
    expect(journal.settings()).toMatchObject({
      journalMode: "wal",
      synchronous: 1,
      walFdatasync: true,
      lockingMode: "normal",
      writerLock: path.join(fs.realpathSync(path.dirname(file)), path.basename(file)),
    });
    expect(() => openSqliteJournal({ path: file, recentLimit: 10, busyTimeoutMs: 50 }).load()).toThrow(/in use by another process/);
    journal.close();
  });
});

describe("SqliteJournal checkpoints", () => {
  /** The grant and three commits, each synced, with checkpointEveryCommits 4: the third sync's return starts the checkpoint. */
  async function atCheckpoint() {
    const sync = heldSync();
    const { file, journal } = started(newPath(), { fdatasync: sync.fdatasync, checkpointEveryCommits: 4 });
    for (let seq = 0; seq < 3; seq++) {
      const p = journal.commitAsync([intent("v1", 1, seq)]);
      sync.release();
      await p;
    }
    return { sync, file, journal };
  }

  it("copies the -wal into the file, syncs the file on the pool, and writes nothing until that returns", async () => {
    const { sync, file, journal } = await atCheckpoint();
    expect(journal.checkpoints).toBe(1);
    expect(sync.held).toHaveLength(1);
    expect(fs.fstatSync(sync.held[0]!.fd).ino).toBe(fs.statSync(file).ino); // the database file, not the -wal
    const walBefore = fs.readFileSync(`${file}-wal`);
    const fourth = journal.commitAsync([intent("v1", 1, 3)]);
    expect(journal.unsynced).toBe(1);
    expect(sync.held).toHaveLength(1); // no -wal sync: the fourth is not written
    expect(fs.readFileSync(`${file}-wal`).equals(walBefore)).toBe(true);
    expect(await settledYet(fourth)).toBe(false);
    sync.release(); // the database file is durable: the -wal may be reused
    expect(sync.held).toHaveLength(1); // now the fourth's -wal sync
    expect(fs.fstatSync(sync.held[0]!.fd).ino).toBe(fs.statSync(`${file}-wal`).ino);
    sync.release();
    await fourth;
    journal.close();
    expect(seqsOnDisk(file)).toEqual([0, 1, 2, 3]);
  });

  it("a failed sync of the file after a checkpoint rejects the waiting commits and every later one", async () => {
    const { sync, journal } = await atCheckpoint();
    const held = journal.commitAsync([intent("v1", 1, 3)]);
    sync.release(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" }));
    await expect(held).rejects.toThrow(/could not be synced to disk after a checkpoint \(EIO/);
    await expect(journal.commitAsync([intent("v1", 1, 4)])).rejects.toThrow(/after a checkpoint/);
    expect(journal.problem()).toMatch(/after a checkpoint/);
    journal.close();
  });

  it("a synchronous commit during the file's sync finishes the checkpoint first and keeps the order", async () => {
    const { file, journal } = await atCheckpoint();
    const held = journal.commitAsync([intent("v1", 1, 3)]);
    journal.commit([intent("v1", 1, 4)]); // syncs the file, writes 3, then 4, syncs the -wal
    await held;
    journal.close();
    expect(seqsOnDisk(file)).toEqual([0, 1, 2, 3, 4]);
  });

  it("keeps the -wal bounded under a stream of commits, with the real fdatasync", async () => {
    const { file, journal } = started(newPath(), { checkpointEveryCommits: 16 });
    for (let seq = 0; seq < 400; seq++) await journal.commitAsync([intent("v1", 1, seq)]);
    const walBytes = fs.statSync(`${file}-wal`).size;
    expect(journal.checkpoints).toBeGreaterThanOrEqual(20);
    journal.close();
    expect(walBytes).toBeLessThan(1024 * 1024); // 400 commits without checkpoints: ~5 MB
    expect(seqsOnDisk(file)).toHaveLength(400);
  });
});
