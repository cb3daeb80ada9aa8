/**
 * Lost committed history and the journal's mark: the
 * loss of any one of journal.db, journal.db-wal and journal.db-mark is refused or harmless,
 * never a quiet start with lower tokens; `recoverJournal` sets floors above every token
 * ever granted. A crash is taken as a copy of the files while the journal is open (what a
 * SIGKILL leaves on disk: every commit durable in the -wal, the mark saying open).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TOKEN_RESERVE, readMark } from "../../../../src/adapters/journal/mark.ts";
import { recoverJournal } from "../../../../src/adapters/journal/recover.ts";
import { openSqliteJournal, type SqliteJournal } from "../../../../src/adapters/journal/sqlite.ts";
import { refusal } from "../../../support/journal-refusal.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-lost-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let dirs = 0;
/** A journal path in a directory of its own (the mark lives beside it). */
const newPath = (): string => {
  const dir = path.join(root, `d${++dirs}`);
  fs.mkdirSync(dir);
  return path.join(dir, "journal.db");
};

const RECOVER = /run `fencegate journal recover` with this gateway's --config/;

function open(file: string): SqliteJournal {
  const j = openSqliteJournal({ path: file, recentLimit: 8 });
  j.load();
  return j;
}

function grant(j: SqliteJournal, token: number, actuator = "v1"): void {
  j.commit([{ actuator, record: { type: "granted", holder: "ctl-a", token } }]);
}

/** Tokens 1..n granted, then the files copied as a SIGKILL would leave them, without `drop`. */
function crashedWith(n: number, drop: "-wal" | "-mark" | "db" | null = null): string {
  const file = newPath();
  const j = open(file);
  for (let t = 1; t <= n; t++) grant(j, t);
  const copy = newPath();
  for (const suffix of ["", "-wal", "-mark"]) {
    const dropped = drop === "db" ? "" : drop;
    if (suffix !== dropped && fs.existsSync(file + suffix)) fs.copyFileSync(file + suffix, copy + suffix);
  }
  j.close();
  return copy;
}

describe("the journal's mark", () => {
  it("a crash with every file in place loads every grant", () => {
    const file = crashedWith(5);
    const j = open(file);
    grant(j, 6);
    j.close();
    const reopened = openSqliteJournal({ path: file, recentLimit: 8 });
    expect(reopened.load().get("v1")?.highestGranted).toBe(6);
    reopened.close();
  });

  it("the -wal lost after a crash: refused, JOURNAL_LOST_HISTORY, and again at every try", () => {
    const file = crashedWith(5, "-wal");
    for (let attempt = 0; attempt < 2; attempt++) {
      const e = refusal(file);
      expect(e.code).toBe("JOURNAL_LOST_HISTORY");
      expect(e.message).toMatch(/journal\.db-wal is missing, but .*journal\.db-mark says the journal was open/);
      expect(e.message).toMatch(RECOVER);
    }
  });

  it("the -wal gone after a clean stop is no loss: everything is in the database file", () => {
    const file = newPath();
    const j = open(file);
    for (let t = 1; t <= 5; t++) grant(j, t);
    j.close();
    expect(fs.existsSync(`${file}-wal`)).toBe(false);
    expect(readMark(file)).toMatchObject({ open: false });
    const again = openSqliteJournal({ path: file, recentLimit: 8 });
    expect(again.load().get("v1")?.highestGranted).toBe(5);
    again.close();
  });

  it("an older backup of the database restored over a newer one: refused", () => {
    const file = newPath();
    let j = open(file);
    grant(j, 1);
    j.close();
    fs.copyFileSync(file, `${file}.backup`);
    j = open(file);
    for (let t = 2; t <= 5; t++) grant(j, t);
    j.close();
    fs.copyFileSync(`${file}.backup`, file);
    const e = refusal(file);
    expect(e.code).toBe("JOURNAL_LOST_HISTORY");
    expect(e.message).toMatch(/is older than .*journal\.db-mark says \(generation 1, not 2\)/);
  });

  it("the database file lost, the mark kept: refused, nothing created", () => {
    const file = crashedWith(3, "db");
    fs.rmSync(`${file}-wal`, { force: true });
    const e = refusal(file);
    expect(e.code).toBe("JOURNAL_LOST_HISTORY");
    expect(e.message).toMatch(/journal\.db is missing, but .*journal\.db-mark says a journal was kept here/);
    expect(fs.existsSync(file)).toBe(false);
  });

  it("the mark lost alone is harmless: the journal is whole, and a new mark is written from it", () => {
    const file = crashedWith(5, "-mark");
    const j = openSqliteJournal({ path: file, recentLimit: 8 });
    expect(j.load().get("v1")?.highestGranted).toBe(5);
    expect(readMark(file)).toMatchObject({ open: true, ceilings: { v1: 5 + TOKEN_RESERVE } });
    j.close();
  });

  it("a damaged mark is refused with what to do", () => {
    const file = crashedWith(1);
    fs.writeFileSync(`${file}-mark`, "{ not json");
    const e = refusal(file);
    expect(e.code).toBe("JOURNAL_UNREADABLE");
    expect(e.message).toMatch(/journal\.db-mark is damaged/);
  });

  it("keeps every actuator's ceiling above every token granted: a head past it rewrites the mark before the commit counts", () => {
    const file = newPath();
    const j = open(file);
    grant(j, 1);
    expect(readMark(file)?.ceilings.v1).toBe(1 + TOKEN_RESERVE);
    j.commit([{ actuator: "v1", record: { type: "fenceObserved", token: TOKEN_RESERVE + 7, seq: null } }]);
    grant(j, TOKEN_RESERVE + 8);
    expect(readMark(file)?.ceilings.v1).toBe(2 * TOKEN_RESERVE + 7);
    grant(j, 1, "v2");
    expect(readMark(file)?.ceilings).toEqual({ v1: 2 * TOKEN_RESERVE + 7, v2: 1 + TOKEN_RESERVE });
    j.close();
  });

  it("a ceiling never passes the largest token", () => {
    const file = newPath();
    const j = open(file);
    grant(j, Number.MAX_SAFE_INTEGER - 1);
    expect(readMark(file)?.ceilings.v1).toBe(Number.MAX_SAFE_INTEGER);
    j.close();
  });
});

describe("recoverJournal", () => {
  it("after a lost -wal: the next grant is above every token ever granted, and the journal loads again", () => {
    const file = crashedWith(5, "-wal");
    const result = recoverJournal({ path: file, recentLimit: 8, actuators: ["v1", "v9"] });
    expect(result.lost).toMatch(/-wal is missing/);
    // The grants were only in the lost -wal; the mark's ceiling, from the first grant, covers them.
    expect(result.raised).toEqual([{ actuator: "v1", before: 0, floor: 1 + TOKEN_RESERVE }]);
    const j = open(file);
    grant(j, 2 + TOKEN_RESERVE);
    j.close();
    const reopened = openSqliteJournal({ path: file, recentLimit: 8 });
    expect(reopened.load().get("v1")).toMatchObject({ highestGranted: 2 + TOKEN_RESERVE, lastGrantHolder: "ctl-a" });
    reopened.close();
    // Recovered once: nothing more is missing, a second run changes nothing.
    expect(recoverJournal({ path: file, recentLimit: 8, actuators: ["v1"] })).toEqual({ lost: null, walMovedTo: null, raised: [] });
  });

  it("after the database file was lost: a new journal above every token of the old one", () => {
    const file = crashedWith(3, "db");
    fs.rmSync(`${file}-wal`, { force: true });
    const result = recoverJournal({ path: file, recentLimit: 8, actuators: ["v1"] });
    expect(result.lost).toMatch(/is missing, but/);
    expect(result.raised).toEqual([{ actuator: "v1", before: 0, floor: 1 + TOKEN_RESERVE }]);
  });

  it("a -wal left without its database is moved aside, not applied to the new one", () => {
    const file = crashedWith(3, "db");
    const result = recoverJournal({ path: file, recentLimit: 8, actuators: ["v1"] });
    expect(result.walMovedTo).toMatch(/journal\.db-wal\.orphan-\d+$/);
    expect(fs.existsSync(result.walMovedTo!)).toBe(true);
  });

  it("changes nothing when nothing is missing, unless given a floor of the operator's own", () => {
    const file = newPath();
    const j = open(file);
    grant(j, 4);
    j.close();
    expect(recoverJournal({ path: file, recentLimit: 8, actuators: ["v1"] }).raised).toEqual([]);
    expect(recoverJournal({ path: file, recentLimit: 8, actuators: ["v1", "v2"], floor: 100 }).raised).toEqual([
      { actuator: "v1", before: 4, floor: 100 },
      { actuator: "v2", before: 0, floor: 100 },
    ]);
  });

  it("is refused while the daemon holds the journal", () => {
    const file = newPath();
    const j = open(file);
    try {
      expect(() => recoverJournal({ path: file, recentLimit: 8, actuators: ["v1"] })).toThrow(/in use by another process/);
    } finally {
      j.close();
    }
  });
});
