/**
 * npm run bench:core: how fast the core decides, and what a durable decision costs.
 *
 *  - core: `step` driven with acquire / command / deviceResult / release, no journal;
 *  - journal: SQLite commit latency (one record per commit), against the floor of the same
 *    disk: raw append + fdatasync of a record-sized buffer; measured in alternating rounds
 *    so a noisy neighbour hits both alike. Appending grows the file, so each fdatasync also
 *    flushes the size; SQLite's WAL is rewritten in place after a checkpoint and does not.
 *    A second floor, overwrite in place (preallocated) + fdatasync, shows that difference;
 *  - group commit: commits of 1, 8 and 32 records.
 *
 * Files go to <repo>/tmp/bench-<time>/ (same filesystem as the repo, checked) and are
 * removed after. Results: a table on stdout, JSON in bench/results/core-<time>.json.
 * Sizes: BENCH_COMMITS (default 2000), BENCH_CORE_MS (default 1500).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { EMPTY_SNAPSHOT, initialState, step } from "../src/core/actuator.ts";
import type { ActuatorConfig, ActuatorState, Input } from "../src/core/types.ts";
import { openSqliteJournal } from "../src/adapters/journal/sqlite.ts";
import type { JournalEntry } from "../src/shell/ports.ts";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const COMMITS = Number(process.env["BENCH_COMMITS"] ?? 2000);
const CORE_MS = Number(process.env["BENCH_CORE_MS"] ?? 1500);
const ROUNDS = 4;
const RECENT_LIMIT = 32;

interface Latency {
  readonly n: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly meanMs: number;
  readonly perSecond: number;
}

function summarize(samplesMs: number[]): Latency {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  const total = samplesMs.reduce((a, b) => a + b, 0);
  return { n: sorted.length, p50Ms: at(0.5), p99Ms: at(0.99), meanMs: total / sorted.length, perSecond: (sorted.length / total) * 1000 };
}

function timed(fn: () => void): number {
  const start = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

// ---------------------------------------------------------------------------------------
// Core decisions per second

const config: ActuatorConfig = {
  points: { position: { writable: true, min: 0, max: 100 } },
  expiryPolicy: { kind: "hold" },
  limits: { minTtlMs: 100, maxTtlMs: 60_000, queueLimit: 8, recentLimit: RECENT_LIMIT, safeRetryMinMs: 250, safeRetryMaxMs: 10_000 },
};

/** One lease's life: acquire, 50 commands each answered by the device, release. */
function* leaseCycle(holder: string, token: number, nowMs: number): Generator<Input> {
  yield { type: "acquire", nowMs, ref: 1, holder, ttlMs: 10_000 };
  for (let seq = 0; seq < 50; seq++) {
    yield { type: "command", nowMs, ref: 2, holder, token, seq, set: { position: seq }, deadlineMs: 1000 };
    yield { type: "deviceResult", nowMs, token, seq, outcome: { kind: "applied", applied: { position: seq } } };
  }
  yield { type: "release", nowMs, ref: 3, holder, token };
}

function benchCore(durationMs: number): { decisions: number; perSecond: number; nsPerDecision: number; accepted: number } {
  let state: ActuatorState = step(config, initialState(EMPTY_SNAPSHOT), { type: "link", nowMs: 0, online: true }).state;
  let decisions = 0;
  let accepted = 0;
  let nowMs = 1;
  const start = performance.now();
  while (performance.now() - start < durationMs) {
    for (const input of leaseCycle(`ctl-${nowMs % 3}`, state.highestGranted + 1, nowMs)) {
      const result = step(config, state, input);
      state = result.state;
      decisions += 1;
      for (const e of result.effects) if (e.kind === "deviceWrite") accepted += 1;
    }
    nowMs += 1;
  }
  const elapsedMs = performance.now() - start;
  if (accepted === 0) throw new Error("bench: the core accepted no command; the workload is wrong");
  return { decisions, perSecond: (decisions / elapsedMs) * 1000, nsPerDecision: (elapsedMs * 1e6) / decisions, accepted };
}

// ---------------------------------------------------------------------------------------
// Journal and floor

/** An endless, valid stream of decisions over four actuators: grant, then intent/outcome pairs. */
function* decisions(): Generator<JournalEntry> {
  const ids = ["valve-1", "valve-2", "damper-3", "drive-4"];
  for (const actuator of ids) yield { actuator, record: { type: "granted", holder: "ctl-a", token: 1 } };
  for (let seq = 0; ; seq++) {
    const actuator = ids[seq % ids.length]!;
    yield { actuator, record: { type: "intent", holder: "ctl-a", token: 1, seq, set: { position: seq % 100 } } };
    yield { actuator, record: { type: "outcome", token: 1, seq, outcome: { kind: "applied", applied: { position: seq % 100 } } } };
  }
}

function take(source: Iterator<JournalEntry>, n: number): JournalEntry[] {
  const out: JournalEntry[] = [];
  for (let i = 0; i < n; i++) out.push(source.next().value as JournalEntry);
  return out;
}

function main(): void {
  const tmpRoot = path.join(repo, "tmp");
  fs.mkdirSync(tmpRoot, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const dir = fs.mkdtempSync(path.join(tmpRoot, `bench-${stamp}-`));
  const sameDisk = fs.statSync(dir).dev === fs.statSync(repo).dev;
  const loadBefore = os.loadavg();

  try {
    console.log(
      `fencegate bench:core — node ${process.version}, ${os.cpus().length} CPUs, load ${loadBefore.map((l) => l.toFixed(1)).join(" ")}`,
    );
    console.log(`files in ${dir} (same filesystem as the repo: ${sameDisk ? "yes" : "NO"})\n`);

    benchCore(200); // warm-up
    const core = benchCore(CORE_MS);

    const journal = openSqliteJournal({ path: path.join(dir, "journal.db"), recentLimit: RECENT_LIMIT });
    journal.load();
    const stream = decisions();
    journal.commit(take(stream, 4)); // the grants
    const sample = JSON.stringify(take(stream, 1)[0]);
    const floorFd = fs.openSync(path.join(dir, "floor.log"), "a");
    const floorRecord = Buffer.from(`${sample}\n`);
    const RING_BYTES = 1 << 20;
    const ringFd = fs.openSync(path.join(dir, "floor-ring.log"), "w+");
    fs.writeSync(ringFd, Buffer.alloc(RING_BYTES));
    fs.fsyncSync(ringFd);
    let ringAt = 0;

    for (let i = 0; i < 100; i++) journal.commit(take(stream, 1)); // warm-up
    const journalMs: number[] = [];
    const floorMs: number[] = [];
    const ringMs: number[] = [];
    const perRound = Math.ceil(COMMITS / ROUNDS);
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < perRound; i++) {
        const entries = take(stream, 1);
        journalMs.push(timed(() => journal.commit(entries)));
      }
      for (let i = 0; i < perRound; i++) {
        floorMs.push(
          timed(() => {
            fs.writeSync(floorFd, floorRecord);
            fs.fdatasyncSync(floorFd);
          }),
        );
      }
      for (let i = 0; i < perRound; i++) {
        ringMs.push(
          timed(() => {
            fs.writeSync(ringFd, floorRecord, 0, floorRecord.length, ringAt);
            fs.fdatasyncSync(ringFd);
          }),
        );
        ringAt = (ringAt + floorRecord.length) % (RING_BYTES - floorRecord.length);
      }
    }
    fs.closeSync(floorFd);
    fs.closeSync(ringFd);
    const single = summarize(journalMs);
    const floor = summarize(floorMs);
    const floorInPlace = summarize(ringMs);

    const group: Record<string, Latency & { recordsPerSecond: number }> = {};
    for (const batch of [1, 8, 32]) {
      const samples: number[] = [];
      const n = Math.max(50, Math.ceil(COMMITS / 4));
      for (let i = 0; i < n; i++) {
        const entries = take(stream, batch);
        samples.push(timed(() => journal.commit(entries)));
      }
      const s = summarize(samples);
      group[String(batch)] = { ...s, recordsPerSecond: s.perSecond * batch };
    }
    const settings = journal.settings();
    journal.close();

    const ratio = { p50: single.p50Ms / floor.p50Ms, p99: single.p99Ms / floor.p99Ms, throughput: floor.perSecond / single.perSecond };
    const ratioInPlace = {
      p50: single.p50Ms / floorInPlace.p50Ms,
      p99: single.p99Ms / floorInPlace.p99Ms,
      throughput: floorInPlace.perSecond / single.perSecond,
    };
    const f = (x: number, d = 3) => x.toFixed(d).padStart(9);
    const rows: [string, string, string, string, string][] = [
      [
        "core step (no journal)",
        "-".padStart(9),
        "-".padStart(9),
        f(core.nsPerDecision / 1e6, 5),
        `${Math.round(core.perSecond).toLocaleString("en")} decisions/s`,
      ],
      [
        "journal commit, 1 record",
        f(single.p50Ms),
        f(single.p99Ms),
        f(single.meanMs),
        `${Math.round(single.perSecond).toLocaleString("en")} commits/s`,
      ],
      [
        "floor: append + fdatasync",
        f(floor.p50Ms),
        f(floor.p99Ms),
        f(floor.meanMs),
        `${Math.round(floor.perSecond).toLocaleString("en")} syncs/s`,
      ],
      [
        "floor: overwrite + fdatasync",
        f(floorInPlace.p50Ms),
        f(floorInPlace.p99Ms),
        f(floorInPlace.meanMs),
        `${Math.round(floorInPlace.perSecond).toLocaleString("en")} syncs/s`,
      ],
      ...Object.entries(group).map(([b, s]): [string, string, string, string, string] => [
        `group commit, ${b} record${b === "1" ? "" : "s"}`,
        f(s.p50Ms),
        f(s.p99Ms),
        f(s.meanMs),
        `${Math.round(s.perSecond).toLocaleString("en")} commits/s = ${Math.round(s.recordsPerSecond).toLocaleString("en")} records/s`,
      ]),
    ];
    console.log(`${"".padEnd(30)}${"p50 ms".padStart(9)} ${"p99 ms".padStart(9)} ${"mean ms".padStart(9)}   rate`);
    for (const [name, p50, p99, mean, rate] of rows) console.log(`${name.padEnd(30)}${p50} ${p99} ${mean}   ${rate}`);
    const show = (r: typeof ratio) =>
      `p50 ×${r.p50.toFixed(2)}, p99 ×${r.p99.toFixed(2)}, throughput ×${r.throughput.toFixed(2)} (floor ÷ journal)`;
    console.log(`\njournal / append floor:    ${show(ratio)}`);
    console.log(`journal / overwrite floor: ${show(ratioInPlace)}`);
    console.log(
      `journal: ${settings.journalMode}, synchronous=${settings.synchronous} (2 = FULL), ${COMMITS} single-record commits in ${ROUNDS} rounds alternating with the floor`,
    );

    const results = {
      at: new Date().toISOString(),
      node: process.version,
      cpus: os.cpus().length,
      loadavg: { before: loadBefore, after: os.loadavg() },
      dir,
      sameFilesystemAsRepo: sameDisk,
      journalSettings: settings,
      core,
      journal: { single, floor, ratio, floorInPlace, ratioInPlace, recordBytes: floorRecord.length },
      groupCommit: group,
    };
    const out = path.join(repo, "bench", "results", `core-${stamp}.json`);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
    console.log(`\nwrote ${path.relative(repo, out)}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
