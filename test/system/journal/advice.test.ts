/**
 * What the journal's refusals advise is safe to follow: each cause is named (a damaged
 * mark, a read-only filesystem), and "restore from backup" (which on its own grants tokens
 * again) is never advised without the floor that keeps tokens above the lost history:
 * the current mark kept, then `fencegate journal recover`. `fencegate log` reads a journal
 * on read-only media (a failing SD card remounted read-only), as root too.
 *
 * The read-only filesystem is a read-only bind mount in a mount namespace of its own
 * (`unshare --mount`), as the kernel leaves a failing card.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { markPath } from "../../../src/adapters/journal/mark.ts";
import { openSqliteJournal, type SqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { fatalLine, writeUnconnectedConfig } from "../../support/daemon.ts";
import { expectOpensWhole, refusal } from "../../support/journal-refusal.ts";
import { fencegateShellCommand, runToolSync } from "../../support/processes.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-advice-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const newDir = (): string => fs.mkdtempSync(path.join(root, `d${++dirs}-`));

/** Restore advice always comes with the kept mark and the recovery that raises the floor. */
const SAFE_RESTORE = /keep .*journal\.db-mark.* where it is.*restore the journal from a backup.*then run `fencegate journal recover`/i;

function open(file: string): SqliteJournal {
  const j = openSqliteJournal({ path: file, recentLimit: 8 });
  j.load();
  return j;
}

/** Tokens 1..3 granted with commands, then the files as a SIGKILL leaves them (the -wal holding the commits), in a directory of their own. */
function crashed(): string {
  const live = path.join(newDir(), "journal.db");
  const j = open(live);
  for (let t = 1; t <= 3; t++) {
    j.commit([
      { actuator: "valve-1", record: { type: "granted", holder: "ctl-a", token: t } },
      { actuator: "valve-1", record: { type: "intent", holder: "ctl-a", token: t, seq: 1, set: { position: t } } },
    ]);
  }
  const copy = path.join(newDir(), "journal.db");
  for (const suffix of ["", "-wal", "-shm", "-mark"]) fs.copyFileSync(live + suffix, copy + suffix);
  j.close();
  return copy;
}

/** The same journal stopped cleanly: the database file and the mark, no -wal. */
function stopped(): string {
  const file = path.join(newDir(), "journal.db");
  const j = open(file);
  j.commit([
    { actuator: "valve-1", record: { type: "granted", holder: "ctl-a", token: 1 } },
    { actuator: "valve-1", record: { type: "intent", holder: "ctl-a", token: 1, seq: 1, set: { position: 42 } } },
  ]);
  j.close();
  return file;
}

/** `fencegate ARGS` with `dir` mounted read-only for it alone (a mount namespace of its own). */
function onReadOnly(dir: string, args: string[]) {
  const command = fencegateShellCommand(args);
  return runToolSync(
    "unshare",
    [
      "--mount",
      "--propagation",
      "private",
      "sh",
      "-c",
      `mount --bind '${dir}' '${dir}' && mount -o remount,bind,ro '${dir}' && exec ${command}`,
    ],
    { timeoutMs: 60_000 },
  );
}

describe("a damaged mark", () => {
  it("after a crash with the -wal intact: remove the mark, never restore; removing it keeps every token", () => {
    const file = crashed();
    fs.writeFileSync(markPath(file), '{"format":1,"gener');
    const e = refusal(file, 8);
    expect(e.message).toMatch(/the -wal beside it is there/i);
    expect(e.message).toContain(`remove ${markPath(file)}`);
    expect(e.message).not.toMatch(/restore/i);
    fs.rmSync(markPath(file));
    expectOpensWhole(file, "valve-1", 3);
  });

  it("with no -wal beside it: remove it and recover with a floor of your own, never restore", () => {
    const file = stopped();
    fs.writeFileSync(markPath(file), "garbage");
    const e = refusal(file, 8);
    expect(e.message).toContain(`remove ${markPath(file)}`);
    expect(e.message).toMatch(/--floor/);
    expect(e.message).not.toMatch(/restore/i);
  });
});

describe("a damaged journal", () => {
  it("advises restoring only with the current mark kept and `journal recover` after it", () => {
    const file = stopped();
    fs.writeFileSync(file, Buffer.alloc(8192, 7));
    const e = refusal(file, 8);
    expect(e.code).toBe("JOURNAL_UNREADABLE");
    expect(e.message).toMatch(SAFE_RESTORE);
  });
});

describe("a read-only filesystem", () => {
  it("is named as such at the daemon's start, exit 74, with no advice to restore or move the journal", () => {
    const file = stopped();
    const run = onReadOnly(path.dirname(file), [
      "daemon",
      "--config",
      writeUnconnectedConfig(path.join(newDir(), "gateway.yaml"), file),
      "--log-format",
      "json",
    ]);
    expect(run.code).toBe(74);
    const fatal = fatalLine(run.stdout)!;
    expect(fatal.msg).toContain("the filesystem is read-only: check the card and the mount");
    expect(fatal.msg).not.toMatch(/restore|move it/i);
  });

  it("does not keep `fencegate log` from reading a cleanly stopped journal, as root", () => {
    const file = stopped();
    const run = onReadOnly(path.dirname(file), ["log", "valve-1", "--journal", file, "--json"]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual([expect.objectContaining({ token: 1, seq: 1, set: { position: 42 } })]);
  });

  it("does not keep `fencegate log` from reading a crashed journal's -wal", () => {
    const file = crashed();
    const run = onReadOnly(path.dirname(file), ["log", "valve-1", "--journal", file, "--json"]);
    expect(run.code).toBe(0);
    expect((JSON.parse(run.stdout) as { token: number }[]).map((e) => e.token)).toEqual([3, 2, 1]);
  });
});
