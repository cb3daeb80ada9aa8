/**
 * Durability on the real system calls: the journal's child runs under strace, and for every
 * commit we check in the trace that an fdatasync of the -wal file started after the commit's
 * last write to the -wal and returned before the commit was reported durable. (SIGKILL tests
 * cannot see a missing fsync: the page cache survives a killed process.)
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-fsync-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const COMMITS = 30;

interface Call {
  readonly kind: "marker" | "walWrite" | "syncStart" | "syncEnd";
  readonly text?: string;
}

/** The trace as an ordered list of the events we care about (strace prints calls in the order they start; an interrupted call is finished by a "resumed" line). */
function parseTrace(trace: string): Call[] {
  const calls: Call[] = [];
  const unfinished = new Set<string>();
  for (const line of trace.split("\n")) {
    const pid = /^\[pid\s+(\d+)\]/.exec(line)?.[1] ?? "main";
    const marker = /write\(1<[^>]*>, "((?:pending|durable) \d+)\\n"/.exec(line);
    if (marker) calls.push({ kind: "marker", text: marker[1]! });
    else if (/p?write(64)?\(\d+<[^>]*-wal>/.test(line)) calls.push({ kind: "walWrite" });
    else if (/fdatasync\(\d+<[^>]*-wal>/.test(line)) {
      calls.push({ kind: "syncStart" });
      if (line.includes("<unfinished ...>")) unfinished.add(pid);
      else if (/= 0$/.test(line)) calls.push({ kind: "syncEnd" });
    } else if (/<\.\.\. fdatasync resumed>.*= 0$/.test(line) && unfinished.delete(pid)) calls.push({ kind: "syncEnd" });
  }
  return calls;
}

describe("SqliteJournal durability, traced", () => {
  it("reports no commit durable before an fdatasync of the -wal that started after its writes has returned", () => {
    const file = path.join(root, "journal.db");
    const out = path.join(root, "trace.txt");
    const run = spawnSync("strace", ["-f", "-y", "-qq", "-o", out, "-e", "trace=write,pwrite64,fdatasync", process.execPath, "--import", "tsx", path.join(here, "fsync-child.ts"), file, String(COMMITS)], {
      cwd: path.resolve(here, "../.."),
      encoding: "utf8",
      timeout: 60_000,
    });
    if (run.error) throw new Error(`strace could not run (${run.error.message}); .ci/run installs it (apt-get install strace)`);
    expect(run.status, run.stderr).toBe(0);
    const calls = parseTrace(fs.readFileSync(out, "utf8"));
    let checked = 0;
    for (let k = 0; k < COMMITS; k++) {
      const pending = calls.findIndex((c) => c.text === `pending ${k}`);
      const durable = calls.findIndex((c) => c.text === `durable ${k}`);
      expect(pending, `pending ${k} in the trace`).toBeGreaterThanOrEqual(0);
      expect(durable, `durable ${k} after pending ${k}`).toBeGreaterThan(pending);
      // The commit's writes: from its marker up to the next commit's marker (each commit is written synchronously in commitAsync).
      const nextPending = calls.findIndex((c, i) => i > pending && c.kind === "marker" && c.text?.startsWith("pending"));
      const writesEnd = nextPending < 0 ? durable : Math.min(nextPending, durable);
      const lastWrite = calls.findLastIndex((c, i) => i > pending && i < writesEnd && c.kind === "walWrite");
      expect(lastWrite, `commit ${k} wrote to the -wal`).toBeGreaterThan(pending);
      // Some fdatasync that started after that write has returned before "durable k".
      let startedAfter = false;
      let ok = false;
      for (let i = lastWrite + 1; i < durable; i++) {
        if (calls[i]!.kind === "syncStart") startedAfter = true;
        if (calls[i]!.kind === "syncEnd" && startedAfter) ok = true;
      }
      expect(ok, `commit ${k}: an fdatasync of the -wal started after its last write and returned before it was reported durable`).toBe(true);
      checked++;
    }
    expect(checked).toBe(COMMITS);
  });
});
