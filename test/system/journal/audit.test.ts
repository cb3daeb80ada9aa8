/**
 * The audit trail's reader (audit.ts) and what the journal gives it: schema 3's time per
 * record, the migration of a schema 1 journal, and a reader beside an open writer. (The
 * status page answers only once the records handed to the journal are durable: the group
 * committer's whenDurable, test/system/journal/group-commit.test.ts.)
 */
import fs from "node:fs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { AuditError, AuditReader } from "../../../src/adapters/journal/audit.ts";
import { openSqliteJournal, SCHEMA_VERSION } from "../../../src/adapters/journal/sqlite.ts";
import { runToolSync } from "../../support/processes.ts";

const SQLITE_MODULE = new URL("../../../src/adapters/journal/sqlite.ts", import.meta.url).href;

function newPath(): string {
  return join(mkdtempSync(join(tmpdir(), "fencegate-audit-")), "journal.db");
}

/** A journal as fencegate wrote it at schema 1 (its schema verbatim), with two commands. */
function schemaOneJournal(file: string): void {
  const db = new Database(file);
  db.pragma("journal_mode = WAL");
  db.exec(`
    CREATE TABLE actuators (id TEXT PRIMARY KEY, highest_granted INTEGER NOT NULL, fence_token INTEGER NOT NULL, fence_seq INTEGER) STRICT;
    CREATE TABLE commands (id INTEGER PRIMARY KEY, actuator TEXT NOT NULL, token INTEGER NOT NULL, seq INTEGER NOT NULL, holder TEXT NOT NULL, set_json TEXT NOT NULL, outcome_json TEXT) STRICT;
    CREATE INDEX commands_by_command ON commands (actuator, token, seq);
    CREATE INDEX commands_by_arrival ON commands (actuator, id);
    PRAGMA application_id = ${0x464e4347};
    PRAGMA user_version = 1;
    INSERT INTO actuators VALUES ('valve-1', 3, 3, 2);
    INSERT INTO commands (actuator, token, seq, holder, set_json, outcome_json) VALUES
      ('valve-1', 3, 1, 'a', '{"position":1}', '{"kind":"applied","applied":{"position":1}}'),
      ('valve-1', 3, 2, 'a', '{"position":2}', '{"kind":"failed","code":"DEVICE_ERROR","message":"x","modbusCode":2}');
  `);
  db.close();
}

const grant = (token: number, holder = "a") => ({ actuator: "valve-1", record: { type: "granted" as const, holder, token } });
const intent = (token: number, seq: number, holder = "a") => ({
  actuator: "valve-1",
  record: { type: "intent" as const, holder, token, seq, set: { position: seq } },
});
const applied = (token: number, seq: number) => ({
  actuator: "valve-1",
  record: { type: "outcome" as const, token, seq, outcome: { kind: "applied" as const, applied: { position: seq } } },
});

describe("audit trail", () => {
  it("reads a schema 1 journal (no times), and the daemon migrates it to schema 3 keeping every record", () => {
    const file = newPath();
    schemaOneJournal(file);
    const before = AuditReader.open(file);
    expect(before.page({ actuator: "valve-1", limit: 10 }).entries.map((e) => [e.seq, e.atMs, e.outcome.kind])).toEqual([
      [2, null, "failed"],
      [1, null, "applied"],
    ]);
    expect(before.page({ actuator: "valve-1", limit: 10, sinceMs: 0 }).entries).toEqual([]); // no time: no match
    before.close();

    const journal = openSqliteJournal({ path: file, recentLimit: 10, wallNowMs: () => 1_800_000_000_000 });
    expect(journal.settings().schemaVersion).toBe(SCHEMA_VERSION);
    expect(SCHEMA_VERSION).toBe(3);
    expect(journal.load().get("valve-1")).toMatchObject({ highestGranted: 3, fence: { token: 3, seq: 2 } });
    journal.commit([grant(4), intent(4, 1)]);
    journal.commit([applied(4, 1)]);
    const reader = AuditReader.open(file);
    expect(reader.page({ actuator: "valve-1", limit: 10 }).entries.map((e) => [e.token, e.seq, e.atMs, e.outcome.kind])).toEqual([
      [4, 1, 1_800_000_000_000, "applied"],
      [3, 2, null, "failed"],
      [3, 1, null, "applied"],
    ]);
    expect(reader.page({ actuator: "valve-1", limit: 10, sinceMs: 1_800_000_000_000 }).entries.map((e) => e.token)).toEqual([4]);
    reader.close();
    journal.close();
  });

  it("reads beside an open journal, and the journal commits (and checkpoints) while a reader holds its snapshot", () => {
    const file = newPath();
    const journal = openSqliteJournal({ path: file, recentLimit: 1000, checkpointEveryCommits: 4 });
    journal.load();
    journal.commit([grant(1)]);
    const reader = AuditReader.open(file);
    const held = new Database(file, { readonly: true });
    held.exec("BEGIN");
    expect(held.prepare("SELECT count(*) AS n FROM commands").get()).toEqual({ n: 0 });
    for (let seq = 1; seq <= 20; seq++) journal.commit([intent(1, seq), applied(1, seq)]);
    expect(journal.checkpoints).toBeGreaterThan(0);
    expect(held.prepare("SELECT count(*) AS n FROM commands").get()).toEqual({ n: 0 });
    const page = reader.page({ actuator: "valve-1", limit: 5, outcome: "applied", holder: "a" });
    expect(page.entries.map((e) => e.seq)).toEqual([20, 19, 18, 17, 16]);
    expect(reader.page({ actuator: "valve-1", limit: 5, before: page.nextBefore! }).entries.map((e) => e.seq)).toEqual([
      15, 14, 13, 12, 11,
    ]);
    held.exec("COMMIT");
    held.close();
    reader.close();
    journal.close();
    expect(openSqliteJournal({ path: file, recentLimit: 1000 }).load().get("valve-1")!.recent).toHaveLength(20);
  });

  it("a reader after a crash leaves the journal as the crash did: the daemon starts on it again", () => {
    const file = newPath();
    // A gateway that commits and dies without closing: the -wal holds its commits, the mark says open.
    const child = runToolSync(process.execPath, [
      "--import",
      "tsx",
      "--input-type=module",
      "-e",
      `
      const { openSqliteJournal } = await import(${JSON.stringify(SQLITE_MODULE)});
      const j = openSqliteJournal({ path: ${JSON.stringify(file)}, recentLimit: 10 });
      j.load();
      j.commit([{ actuator: "valve-1", record: { type: "granted", holder: "a", token: 7 } }]);
      process.exit(0);
    `,
    ]);
    expect(child.code, child.stderr).toBe(0);
    expect(fs.statSync(`${file}-wal`).size).toBeGreaterThan(0);
    const reader = AuditReader.open(file);
    expect(reader.actuators()).toEqual(["valve-1"]);
    reader.close();
    expect(fs.statSync(`${file}-wal`).size).toBeGreaterThan(0); // a read-only reader neither checkpoints nor removes it
    const journal = openSqliteJournal({ path: file, recentLimit: 10 });
    expect(journal.load().get("valve-1")).toMatchObject({ highestGranted: 7 });
    journal.close();
  });

  it("refuses a file that is not a fencegate journal, or one from a newer fencegate, with a sentence", () => {
    const other = newPath();
    new Database(other).exec("CREATE TABLE t (x)");
    expect(() => AuditReader.open(other)).toThrow(/is not a fencegate journal .* give the daemon's journal.path/);
    const newer = newPath();
    const db = new Database(newer);
    db.pragma(`application_id = ${0x464e4347}`);
    db.pragma("user_version = 99");
    db.close();
    const error = (() => {
      try {
        AuditReader.open(newer);
      } catch (e) {
        return e as AuditError;
      }
      throw new Error("expected a refusal");
    })();
    expect(error.code).toBe("JOURNAL_NEWER_VERSION");
    expect(error.message).toMatch(/schema version 99; this fencegate reads up to 3/);
  });

  it("bounds a page", () => {
    const file = newPath();
    const journal = openSqliteJournal({ path: file, recentLimit: 10 });
    journal.load();
    journal.close();
    const reader = AuditReader.open(file);
    expect(() => reader.page({ actuator: "valve-1", limit: 0 })).toThrow(RangeError);
    expect(() => reader.page({ actuator: "valve-1", limit: 1001 })).toThrow(RangeError);
    reader.close();
  });
});
