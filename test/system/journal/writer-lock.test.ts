/**
 * One gateway per journal, whatever names it goes by: the writer lock is on the database
 * file itself (its inode), not on a name beside it, so deleting a "stale" lock file, a hard
 * link to the journal in another folder, or a symbolic link to it lets no second gateway
 * in. A journal path that is a symbolic link is refused outright: the -wal and -mark beside
 * the link are not those beside the journal.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { refusal } from "../../support/journal-refusal.ts";
import { startProcess, type ChildProcess } from "../../support/processes.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-writer-lock-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const newDir = (): string => fs.mkdtempSync(path.join(root, `d${++dirs}-`));

const children: ChildProcess[] = [];
afterEach(async () => {
  await Promise.all(
    children
      .splice(0)
      .map((c) => new Promise((resolve) => (c.exitCode !== null ? resolve(null) : (c.once("exit", resolve), c.stdin!.end())))),
  );
});

/** Another process with `file` open, as a running daemon has it: resolves once it has granted token 1. */
async function holder(file: string): Promise<ChildProcess> {
  // Stopped by afterEach, which closes its stdin: the holder then closes the journal as a daemon would.
  const child = startProcess(null, process.execPath, ["--import", "tsx", path.join(import.meta.dirname, "holder-child.ts"), file], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.setEncoding("utf8").on("data", (s: string) => s.includes("ready") && resolve());
    child.once("exit", (code) => reject(new Error(`holder exited with ${code}`)));
  });
  return child;
}

function highestGranted(file: string): number | undefined {
  const j = openSqliteJournal({ path: file, recentLimit: 8 });
  try {
    return j.load().get("valve-1")?.highestGranted;
  } finally {
    j.close();
  }
}

describe("the journal's writer lock", () => {
  it("keeps a second gateway off after every other file beside the journal is deleted", async () => {
    const file = path.join(newDir(), "journal.db");
    await holder(file);
    for (const f of fs.readdirSync(path.dirname(file)))
      if (!["journal.db", "journal.db-wal", "journal.db-shm", "journal.db-mark"].includes(f)) fs.rmSync(path.join(path.dirname(file), f));
    expect(refusal(file).message).toMatch(/in use by another process/);
  });

  it("keeps a second gateway off through a hard link to the journal in another folder", async () => {
    const file = path.join(newDir(), "journal.db");
    await holder(file);
    const link = path.join(newDir(), "journal.db");
    fs.linkSync(file, link);
    expect(refusal(link).message).toMatch(/in use by another process/);
    expect(fs.readdirSync(path.dirname(link))).toEqual(["journal.db"]);
  });

  it("keeps a second gateway off through a symbolic link, and writes nothing into the live journal", async () => {
    const file = path.join(newDir(), "journal.db");
    const child = await holder(file);
    const link = path.join(newDir(), "journal.db");
    fs.symlinkSync(file, link);
    const before = fs.readFileSync(file);
    const e = refusal(link);
    expect(e.message).toMatch(/is a symbolic link to .*journal\.db/);
    expect(fs.readFileSync(file)).toEqual(before);
    expect(fs.readdirSync(path.dirname(link))).toEqual(["journal.db"]);
    child.stdin!.end();
    await new Promise((resolve) => child.once("exit", resolve));
    expect(highestGranted(file)).toBe(1);
  });

  it("refuses a journal path that is a symbolic link even with nobody else on it", () => {
    const file = path.join(newDir(), "journal.db");
    openSqliteJournal({ path: file, recentLimit: 8 }).close();
    const link = path.join(newDir(), "journal.db");
    fs.symlinkSync(file, link);
    expect(refusal(link)).toMatchObject({
      code: "JOURNAL_UNREADABLE",
      message: expect.stringContaining("point journal.path at the file itself"),
    });
  });

  it("is taken on the real file when the journal's directory is reached through a link", () => {
    const dir = newDir();
    const linkedDir = path.join(newDir(), "state");
    fs.symlinkSync(dir, linkedDir);
    const j = openSqliteJournal({ path: path.join(linkedDir, "journal.db"), recentLimit: 8 });
    try {
      expect(j.settings().writerLock).toBe(path.join(fs.realpathSync(dir), "journal.db"));
    } finally {
      j.close();
    }
  });
});
