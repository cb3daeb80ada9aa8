/**
 * A start that fails (a full disk, a mark that cannot be written) leaves the journal's files
 * as they were: SQLite's own checkpoint when the last connection closes would otherwise copy
 * the -wal into the database and delete it, while the mark still says open, and the next
 * start would refuse with a false JOURNAL_LOST_HISTORY (whose recovery moves tokens up by a
 * million). A full disk is named as such.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { markPath, readMark } from "../../../src/adapters/journal/mark.ts";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { writeUnconnectedConfig } from "../../support/daemon.ts";
import { expectOpensWhole, refusal } from "../../support/journal-refusal.ts";
import { fencegateShellCommand, runToolSync, shellWord as q } from "../../support/processes.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-failed-start-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const newDir = (): string => fs.mkdtempSync(path.join(root, `d${++dirs}-`));

/** Tokens 1..n granted to valve-1, then the files (with -shm) as a SIGKILL leaves them, in `dir`. */
function crashedInto(dir: string, n: number): string {
  const live = path.join(newDir(), "journal.db");
  const j = openSqliteJournal({ path: live, recentLimit: 8 });
  j.load();
  for (let t = 1; t <= n; t++) j.commit([{ actuator: "valve-1", record: { type: "granted", holder: "ctl-a", token: t } }]);
  const copy = path.join(dir, "journal.db");
  for (const suffix of ["", "-wal", "-shm", "-mark"]) fs.copyFileSync(live + suffix, copy + suffix);
  j.close();
  return copy;
}

describe("a start that fails", () => {
  it("leaves the -wal and the mark as they were, so the next start finds nothing missing", () => {
    const file = crashedInto(newDir(), 3);
    const wal = fs.readFileSync(`${file}-wal`);
    expect(readMark(file)?.open).toBe(true);
    fs.mkdirSync(`${markPath(file)}.tmp`); // the mark cannot be written: the start fails after the journal's checks
    refusal(file, 8);
    expect(fs.existsSync(`${file}-wal`)).toBe(true);
    expect(fs.readFileSync(`${file}-wal`).subarray(0, wal.length)).toEqual(wal);
    fs.rmdirSync(`${markPath(file)}.tmp`);
    expectOpensWhole(file, "valve-1", 3);
  });

  it("on a full disk says so, exit 74, and once space is freed the journal starts with nothing missing", () => {
    const dir = newDir();
    const config = path.join(newDir(), "gateway.yaml");
    const journal = path.join(dir, "journal.db");
    writeUnconnectedConfig(config, journal);
    const stash = crashedInto(newDir(), 3);
    // A small filesystem of its own, the crashed journal on it, then filled to the last byte.
    const script = [
      `mount -t tmpfs -o size=2m none ${q(dir)}`,
      `cp -p ${q(stash)} ${q(stash)}-wal ${q(stash)}-shm ${q(stash)}-mark ${q(dir)}/`,
      `dd if=/dev/zero of=${q(dir)}/filler bs=4k 2>/dev/null; true`,
      `${fencegateShellCommand(["daemon", "--config", config, "--log-format", "json"])}; echo "daemon-exit $?"`,
      `rm ${q(dir)}/filler`,
      `${fencegateShellCommand(["journal", "recover", "--config", config, "--json"])}`,
    ].join("\n");
    const run = runToolSync("unshare", ["--mount", "--propagation", "private", "sh", "-c", script], { timeoutMs: 90_000 });
    const lines = run.stdout.split("\n").filter(Boolean);
    expect(lines).toContain("daemon-exit 74");
    const fatal = lines
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l))
      .find((l) => l.level === 60);
    expect(fatal.msg).toContain("the disk is full: free space and start again");
    expect(fatal.msg).not.toMatch(/restore|move it/i);
    expect(JSON.parse(lines.at(-1)!)).toMatchObject({ lost: null, raised: [] });
  });
});
