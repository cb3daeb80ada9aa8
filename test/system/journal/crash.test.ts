/**
 * The real SQLite journal under SIGKILL. A child (crash-child.ts) commits decisions in a
 * loop and reports each commit; we kill it at random moments, reopen the journal and check
 * that it holds exactly what was committed, plus at most the one commit in flight, and that
 * no token or fence ever went backwards.
 *
 * SIGKILL loses the process, not the machine: what the kernel had accepted survives. This
 * checks atomicity and recovery; that a commit is not reported before the fdatasync of the
 * -wal file that covers it returned is checked in sqlite-async.test.ts and, on the real
 * system calls, in sqlite-fsync.test.ts. Only a power cut could test the disk itself.
 *
 * It runs twice: the child committing with commit() (synced before it returns), and the
 * child committing with commitAsync() with several batches pipelined (as the daemon's group
 * committer does, with the fdatasync on libuv's pool); then the journal must hold what was
 * reported plus some prefix of the batches still in flight.
 *
 * Replay one run: FENCEGATE_CRASH_SEED=<seed printed on failure>.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DurableSnapshot } from "../../../src/core/actuator.ts";
import type { Fence } from "../../../src/core/types.ts";
import { foldEntries, restartAll } from "../../../src/adapters/journal/memory.ts";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import type { JournalEntry } from "../../../src/shell/ports.ts";
import { startProcess } from "../../support/processes.ts";
import { Teardown } from "../../support/stack.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../../..");
const child = path.join(here, "crash-child.ts");

// Children run side by side, each on its own journal: their start-up (CPU bound) dominates a
// run, so one lane per CPU, at most 3.
const LANES = Math.max(1, Math.min(3, os.availableParallelism()));
const KILLS = Number(process.env["FENCEGATE_CRASH_KILLS"] ?? 30);
const RECENT_LIMIT = 16;
const BIG = Number.MAX_SAFE_INTEGER - 1_000_000;

const teardown = new Teardown();
const root = teardown.add(fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-crash-")), (d) =>
  fs.rmSync(d, { recursive: true, force: true }),
);
afterAll(() => teardown.run());

/**
 * How to start the child. `node --import tsx` costs ~0.45 s of CPU per start, which on a
 * loaded two-CPU machine stretched 30 kills past 35 s; the same source bundled once with
 * esbuild (tsx's own compiler, present as its dependency) starts for ~0.1 s of CPU. The
 * bundle lives in the repo's ignored tmp/ so that it resolves better-sqlite3 from
 * node_modules. Without esbuild we fall back to tsx.
 */
let childArgs = ["--import", "tsx", child];
let childKind = "tsx";
let bundleDir: string | null = null;
afterAll(() => {
  if (bundleDir !== null) fs.rmSync(bundleDir, { recursive: true, force: true });
});
beforeAll(async () => {
  try {
    const esbuild = (await import("esbuild" as string)) as typeof import("esbuild");
    fs.mkdirSync(path.join(repo, "tmp"), { recursive: true });
    bundleDir = fs.mkdtempSync(path.join(repo, "tmp", "crash-child-"));
    const outfile = path.join(bundleDir, "crash-child.mjs");
    const common: import("esbuild").BuildOptions = {
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      external: ["better-sqlite3"],
      logLevel: "error",
    };
    esbuild.buildSync({ ...common, entryPoints: [child], outfile });
    childArgs = [outfile];
    childKind = "esbuild bundle";
  } catch {
    // keep tsx
  }
});

interface Run {
  readonly seed: number;
  readonly committed: JournalEntry[][];
  /** Made, not yet durable, oldest first (at most one when committing sync). */
  readonly pending: JournalEntry[][];
  readonly signal: NodeJS.Signals | null;
  readonly startupMs: number;
  readonly killAfterMs: number;
}

/** Starts the child and SIGKILLs it `killAfterMs` after it is `ready` (or, with `duringLoad`, after `loading`). */
function runChild(mode: Mode, file: string, seed: number, killAfterMs: number, duringLoad: boolean): Promise<Run> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const p = startProcess(
      teardown,
      process.execPath,
      [...childArgs, file, String(seed), String(RECENT_LIMIT), ...(mode === "pipelined" ? ["pipelined"] : [])],
      { cwd: repo },
    );
    const committed: JournalEntry[][] = [];
    const pending: JournalEntry[][] = [];
    let startupMs = Number.NaN;
    let buffer = "";
    let stderr = "";
    const killLater = () => setTimeout(() => p.kill("SIGKILL"), killAfterMs);
    p.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    p.stdout!.on("data", (d: Buffer) => {
      buffer += d.toString();
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = JSON.parse(buffer.slice(0, nl)) as { ev: string; entries?: JournalEntry[] };
        buffer = buffer.slice(nl + 1);
        if (line.ev === "loading" && duringLoad) killLater();
        if (line.ev === "ready") {
          startupMs = performance.now() - started;
          if (!duringLoad) killLater();
        }
        if (line.ev === "pending") pending.push(line.entries ?? []);
        if (line.ev === "committed") {
          const oldest = pending.shift();
          if (oldest === undefined) reject(new Error(`child (seed ${seed}) reported a commit it never posted`));
          committed.push(oldest ?? []);
        }
      }
    });
    p.on("error", reject);
    p.on("close", (code, signal) => {
      if (signal !== "SIGKILL") reject(new Error(`child (seed ${seed}) ended with code ${code}, signal ${signal}:\n${stderr}`));
      else resolve({ seed, committed, pending, signal, startupMs, killAfterMs });
    });
  });
}

function load(file: string): ReadonlyMap<string, DurableSnapshot> {
  const journal = openSqliteJournal({ path: file, recentLimit: RECENT_LIMIT });
  try {
    return journal.load();
  } finally {
    journal.close();
  }
}

function compareFence(a: Fence, b: Fence): number {
  return a.token !== b.token ? a.token - b.token : (a.seq ?? -1) - (b.seq ?? -1);
}

type Mode = "sync" | "pipelined";
const inFlightMadeIt: Record<Mode, number> = { sync: 0, pipelined: 0 };

async function lane(mode: Mode, n: number, kills: number, firstSeed: number): Promise<Run[]> {
  const file = path.join(root, `${mode}-lane${n}.db`);
  const setup = openSqliteJournal({ path: file, recentLimit: RECENT_LIMIT });
  setup.load();
  // One actuator works near the top of the token space, to see large integers survive.
  setup.commit([{ actuator: "drive-big", record: { type: "fenceObserved", token: BIG, seq: null } }]);
  setup.close();
  let before = load(file);
  const runs: Run[] = [];
  for (let k = 0; k < kills; k++) {
    const seed = firstSeed + k;
    const random = ((seed * 2654435761) >>> 0) / 2 ** 32;
    // One kill in five lands while the child loads (load() writes OUTCOME_UNKNOWN durably).
    const duringLoad = k % 5 === 4;
    const killAfterMs = duringLoad ? Math.floor(random * 3) : 20 + Math.floor(random * 130);
    const run = await runChild(mode, file, seed, killAfterMs, duringLoad);
    runs.push(run);
    const after = load(file);

    const upToReported = foldEntries(before, run.committed.flat(), RECENT_LIMIT);
    // What was reported, plus any prefix of what was in flight (batches commit in order).
    const allowed = [restartAll(upToReported)];
    let folded = upToReported;
    for (const batch of run.pending) {
      folded = foldEntries(folded, batch, RECENT_LIMIT);
      allowed.push(restartAll(folded));
    }
    const context = `${mode}, lane ${n}, seed ${seed}, kill after ${killAfterMs} ms, ${run.committed.length} commits reported, ${run.pending.length} in flight`;
    expect(allowed, `${context}: the journal is neither what was committed nor that plus a prefix of the commits in flight`).toContainEqual(
      after,
    );
    if (allowed.length > 1) inFlightMadeIt[mode] += allowed.slice(1).some((a) => isDeepStrictEqual(after, a)) ? 1 : 0;
    for (const [id, was] of before) {
      const now = after.get(id);
      expect(now, `${context}: ${id} vanished`).toBeDefined();
      expect(now!.highestGranted, `${context}: ${id} highestGranted went back`).toBeGreaterThanOrEqual(was.highestGranted);
      expect(compareFence(now!.fence, was.fence), `${context}: ${id} fence went back`).toBeGreaterThanOrEqual(0);
    }
    before = after;
  }
  return runs;
}

describe.each(["sync", "pipelined"] as const)("SqliteJournal under SIGKILL, committing %s", (mode) => {
  it(`keeps every reported commit and never goes backwards (${KILLS} kills)`, async () => {
    const base = Number(process.env["FENCEGATE_CRASH_SEED"] ?? Date.now() % 1_000_000);
    const perLane = Math.ceil(KILLS / LANES);
    const runs = (await Promise.all(Array.from({ length: LANES }, (_, n) => lane(mode, n, perLane, base + n * 10_000)))).flat();

    expect(runs.length).toBeGreaterThanOrEqual(KILLS);
    const commits = runs.map((r) => r.committed.length);
    const midCommit = runs.filter((r) => r.pending.length > 0).length;
    const startup = runs
      .map((r) => r.startupMs)
      .filter(Number.isFinite)
      .sort((a, b) => a - b);
    console.log(
      `crash test (${mode}): seed ${base}, ${runs.length} kills, ${commits.reduce((a, b) => a + b, 0)} commits reported, ` +
        `${midCommit} kills with a commit in flight (in ${inFlightMadeIt[mode]} of them some were durable), child (${childKind}) start-up median ${startup[startup.length >> 1]?.toFixed(0)} ms`,
    );
    // The kills must land in the work, not only before it.
    expect(commits.filter((c) => c > 0).length).toBeGreaterThan(KILLS / 2);
  });
});
