import Database from "better-sqlite3";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openSqliteJournal, SCHEMA_VERSION } from "../../../src/adapters/journal/sqlite.ts";
import { refusal } from "../../support/journal-refusal.ts";
import { runToolOrThrow, runToolSync } from "../../support/processes.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-journal-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let files = 0;
const newPath = (): string => path.join(root, `j${++files}.db`);

/** A journal file with one actuator, one completed and one pending command, closed. */
function writtenJournal(recentLimit = 100): string {
  const file = newPath();
  const j = openSqliteJournal({ path: file, recentLimit });
  j.load();
  j.commit([
    { actuator: "v1", record: { type: "granted", holder: "ctl-a", token: 3 } },
    { actuator: "v1", record: { type: "intent", holder: "ctl-a", token: 3, seq: 0, set: { position: 1 } } },
    { actuator: "v1", record: { type: "outcome", token: 3, seq: 0, outcome: { kind: "applied", applied: { position: 1 } } } },
    { actuator: "v1", record: { type: "intent", holder: "ctl-a", token: 3, seq: 1, set: { position: 2 } } },
  ]);
  j.close();
  return file;
}

// Adapted: restoring is advised only with the current mark kept and `journal recover` after it.
const RESTORE = /keep .*-mark where it is .*restore the journal from a backup or move it .* aside, then run `fencegate journal recover`/i;

describe("SqliteJournal", () => {
  // Adapted: the writer lock is a flock on the database file itself (writer-lock.test.ts); SQLite runs normal WAL locking for readers.
  it("runs WAL, synchronous=NORMAL with its own fdatasync of the -wal, the writer lock and the schema version", () => {
    const file = newPath();
    const j = openSqliteJournal({ path: file, recentLimit: 4, busyTimeoutMs: 1234 });
    expect(j.settings()).toMatchObject({
      journalMode: "wal",
      synchronous: 1,
      walFdatasync: true,
      lockingMode: "normal",
      writerLock: path.join(fs.realpathSync(root), path.basename(file)),
      busyTimeoutMs: 1234,
      schemaVersion: SCHEMA_VERSION,
    });
    j.close();
  });

  it("refuses a second opener while the journal is open", () => {
    const file = newPath();
    const first = openSqliteJournal({ path: file, recentLimit: 4 });
    first.load();
    const e = refusal(file);
    expect(e.code).toBe("JOURNAL_UNREADABLE");
    expect(e.message).toMatch(/in use by another process/);
    first.close();
    expect(openSqliteJournal({ path: file, recentLimit: 4 }).load().size).toBe(0);
  });

  it("trims to a smaller recentLimit on load, keeping the newest", () => {
    const file = writtenJournal();
    const j = openSqliteJournal({ path: file, recentLimit: 1 });
    expect(
      j
        .load()
        .get("v1")
        ?.recent.map((r) => r.seq),
    ).toEqual([1]);
    j.close();
  });

  describe("refuses an unreadable file", () => {
    it("garbage bytes", () => {
      const file = newPath();
      fs.writeFileSync(file, Buffer.from("this is not a journal at all, just text that got here somehow\n".repeat(100)));
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_UNREADABLE");
      expect(e.message).toMatch(/not a SQLite database/);
      expect(e.message).toMatch(RESTORE);
    });

    it("an empty file (truncated to nothing): damage, never a fresh start", () => {
      const file = newPath();
      fs.writeFileSync(file, "");
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_UNREADABLE");
      expect(e.message).toMatch(/not a fencegate journal/);
      expect(e.message).toMatch(RESTORE);
    });

    it.each([
      ["to a partial header", (size: number) => Math.min(size, 60)],
      ["to half its pages", (size: number) => Math.floor(size / 2 / 4096) * 4096],
    ])("a file truncated %s", (_, cut) => {
      const file = newPath();
      const j = openSqliteJournal({ path: file, recentLimit: 5000 });
      j.load();
      // Enough rows for several pages, so half the file loses real data.
      for (let seq = 0; seq < 400; seq++) {
        j.commit([
          { actuator: `v${seq % 7}`, record: { type: "intent", holder: "ctl-a".repeat(10), token: 0, seq, set: { position: seq } } },
        ]);
      }
      j.close();
      const size = fs.statSync(file).size;
      expect(size).toBeGreaterThan(4 * 4096);
      fs.truncateSync(file, cut(size));
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_UNREADABLE");
      expect(e.message).toMatch(/damaged|not a SQLite database|not a fencegate journal/);
      expect(e.message).toMatch(RESTORE);
    });

    it("another program's SQLite database", () => {
      const file = newPath();
      const db = new Database(file);
      db.exec("CREATE TABLE notes (body TEXT)");
      db.close();
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_UNREADABLE");
      expect(e.message).toMatch(/not a fencegate journal/);
    });

    it("a -wal file whose database is gone", () => {
      const file = writtenJournal();
      fs.writeFileSync(`${file}-wal`, "left behind");
      fs.rmSync(file);
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_INCONSISTENT");
      expect(e.message).toMatch(/-wal is there/);
    });

    it("a directory where the file should be, or a missing directory", () => {
      const dir = newPath();
      fs.mkdirSync(dir);
      expect(refusal(dir).message).toMatch(/cannot be opened/);
      expect(refusal(path.join(root, "no-such-dir", "j.db")).message).toMatch(/Create the directory/);
    });

    // Root ignores mode bits, so as root the immutable flag stands in for them (when the
    // filesystem and chattr allow it).
    const asRoot = process.getuid?.() === 0;
    const canChattr = asRoot && runToolSync("chattr", ["--help"]).error === undefined;
    it.skipIf(asRoot && !canChattr)("a file the daemon may not write (permission denied)", () => {
      const file = writtenJournal();
      if (asRoot) runToolOrThrow("chattr", ["+i", file]);
      else fs.chmodSync(file, 0o400);
      try {
        const e = refusal(file);
        expect(e.code).toBe("JOURNAL_UNREADABLE");
        expect(e.message).toMatch(/cannot be opened for reading and writing \((EACCES|EPERM)/);
        expect(e.message).toMatch(/may read and write it and its directory/);
      } finally {
        if (asRoot) runToolOrThrow("chattr", ["-i", file]);
      }
    });
  });

  it("refuses a newer schema version without touching it", () => {
    const file = writtenJournal();
    const db = new Database(file);
    db.pragma(`user_version = ${SCHEMA_VERSION + 1}`);
    db.close();
    const e = refusal(file);
    expect(e.code).toBe("JOURNAL_NEWER_VERSION");
    expect(e.message).toMatch(new RegExp(`schema version ${SCHEMA_VERSION + 1}; this fencegate reads up to ${SCHEMA_VERSION}`));
    const check = new Database(file);
    expect(check.prepare("SELECT outcome_json FROM commands WHERE seq = 1").get()).toEqual({ outcome_json: null });
    check.close();
  });

  it("upgrades a schema 1 journal in place: everything kept, the newest grant's holder unknown", () => {
    const file = newPath();
    const db = new Database(file);
    db.pragma("journal_mode = WAL");
    db.exec(`
      CREATE TABLE actuators (id TEXT PRIMARY KEY, highest_granted INTEGER NOT NULL, fence_token INTEGER NOT NULL, fence_seq INTEGER) STRICT;
      CREATE TABLE commands (id INTEGER PRIMARY KEY, actuator TEXT NOT NULL, token INTEGER NOT NULL, seq INTEGER NOT NULL, holder TEXT NOT NULL, set_json TEXT NOT NULL, outcome_json TEXT) STRICT;
      CREATE INDEX commands_by_command ON commands (actuator, token, seq);
      CREATE INDEX commands_by_arrival ON commands (actuator, id);
      PRAGMA application_id = ${0x464e4347};
      PRAGMA user_version = 1;
      INSERT INTO actuators VALUES ('v1', 3, 3, 0);
      INSERT INTO commands (actuator, token, seq, holder, set_json, outcome_json) VALUES ('v1', 3, 0, 'ctl-a', '{"position":1}', '{"kind":"applied","applied":{"position":1}}');
    `);
    db.close();
    const j = openSqliteJournal({ path: file, recentLimit: 8 });
    expect(j.load().get("v1")).toEqual({
      highestGranted: 3,
      lastGrantHolder: null,
      fence: { token: 3, seq: 0 },
      recent: [{ holder: "ctl-a", token: 3, seq: 0, set: { position: 1 }, outcome: { kind: "applied", applied: { position: 1 } } }],
    });
    expect(j.settings().schemaVersion).toBe(SCHEMA_VERSION);
    j.commit([{ actuator: "v1", record: { type: "granted", holder: "ctl-b", token: 4 } }]);
    j.close();
    const again = openSqliteJournal({ path: file, recentLimit: 8 });
    expect(again.load().get("v1")?.lastGrantHolder).toBe("ctl-b");
    again.close();
  });

  describe("refuses an inconsistent journal, naming the row", () => {
    it.each([
      ["UPDATE actuators SET fence_token = 4, fence_seq = NULL", /fence token 4 is above the highest granted token 3/],
      ["UPDATE commands SET token = 5 WHERE seq = 1", /token 5 is above the highest granted token 3/],
      ["UPDATE actuators SET fence_seq = 0", /\(3, 1\) is above the fence \(3, 0\)/],
      ["UPDATE actuators SET highest_granted = -2", /highest_granted is -2, not an integer/],
      ["UPDATE actuators SET highest_granted = 9007199254740993", /highest_granted is 9007199254740993, not an integer from 0 to 2\^53-1/],
      ["UPDATE commands SET seq = -1 WHERE seq = 0", /seq is -1/],
      ["UPDATE commands SET set_json = '{\"position\": ' WHERE seq = 0", /set_json is not valid JSON/],
      ['UPDATE commands SET set_json = \'{"position": "high"}\' WHERE seq = 0', /set_json has the wrong shape/],
      ['UPDATE commands SET outcome_json = \'{"kind": "maybe"}\' WHERE seq = 0', /outcome_json has the wrong shape/],
      ["UPDATE commands SET actuator = 'ghost' WHERE seq = 0", /"ghost": the actuator has no row/],
    ])("%s", (sql, problem) => {
      const file = writtenJournal();
      const db = new Database(file);
      db.exec(sql);
      db.close();
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_INCONSISTENT");
      expect(e.message).toMatch(problem);
      expect(e.message).toMatch(RESTORE);
      // Refused before anything was written: the pending intent is still pending.
      const check = new Database(file);
      expect(check.prepare("SELECT count(*) AS n FROM commands WHERE outcome_json IS NULL").get()).toEqual({ n: 1 });
      check.close();
    });
  });
});
