/**
 * The child of crash.test.ts: opens the real journal and commits decisions as fast as it
 * can until the parent SIGKILLs it. Before each commit it writes the entries to stdout as
 * `pending`, after it `committed`; lines are single small writes to a pipe, so each either
 * arrives whole or not at all.
 *
 * With `pipelined` as a fourth argument it commits with commitAsync instead, like the
 * daemon's group committer: up to PIPELINE batches made and not yet durable; each is
 * reported `pending` when made and `committed` when its promise resolves (they resolve in
 * order, so `committed` always means the oldest pending).
 *
 * Usage: node --import tsx crash-child.ts <journal> <seed> <recentLimit> [pipelined]
 */
import fs from "node:fs";
import type { DurableSnapshot } from "../../../src/core/actuator.ts";
import { EMPTY_SNAPSHOT } from "../../../src/core/actuator.ts";
import type { JournalRecord } from "../../../src/core/types.ts";
import { foldEntries } from "../../../src/adapters/journal/memory.ts";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import type { JournalEntry } from "../../../src/shell/ports.ts";

export const ACTUATORS = ["valve-1", "damper-2", "drive-big"] as const;
const MAX_COMMITS = 50_000; // a bound, far beyond what a run reaches before its kill

const PIPELINE = 4;

const [file, seedText, limitText, mode] = process.argv.slice(2);
if (file === undefined || seedText === undefined || limitText === undefined)
  throw new Error("usage: crash-child.ts <journal> <seed> <recentLimit>");
const recentLimit = Number(limitText);
const random = mulberry32(Number(seedText));
const say = (message: object): void => {
  fs.writeSync(1, `${JSON.stringify(message)}\n`);
};

say({ ev: "loading" });
const journal = openSqliteJournal({ path: file, recentLimit });
let state: ReadonlyMap<string, DurableSnapshot> = journal.load();
say({ ev: "ready" });

if (mode === "pipelined") {
  // The next decisions are made on the state the pending batches will make: they commit in order.
  const inFlight: Promise<void>[] = [];
  for (let i = 0; i < MAX_COMMITS; i++) {
    const entries = decide();
    say({ ev: "pending", entries });
    inFlight.push(journal.commitAsync(entries).then(() => say({ ev: "committed" })));
    state = foldEntries(state, entries, recentLimit);
    if (inFlight.length >= PIPELINE) await inFlight.shift();
  }
  await Promise.all(inFlight);
} else {
  for (let i = 0; i < MAX_COMMITS; i++) {
    const entries = decide();
    say({ ev: "pending", entries });
    journal.commit(entries);
    say({ ev: "committed" });
    state = foldEntries(state, entries, recentLimit);
  }
}
journal.close();
say({ ev: "done" });

/** One commit: an actuator's next step, sometimes two steps, sometimes two actuators. */
function decide(): JournalEntry[] {
  const entries: JournalEntry[] = [];
  const first = pick(ACTUATORS);
  entries.push(...nextSteps(first, state.get(first) ?? EMPTY_SNAPSHOT));
  if (random() < 0.1) {
    const second = pick(ACTUATORS.filter((a) => a !== first));
    entries.push(...nextSteps(second, state.get(second) ?? EMPTY_SNAPSHOT));
  }
  return entries;
}

function nextSteps(actuator: string, s: DurableSnapshot): JournalEntry[] {
  const records: JournalRecord[] = [];
  const last = s.recent.at(-1);
  const pending = last !== undefined && last.outcome === null ? last : null;
  if (pending !== null) {
    records.push({
      type: "outcome",
      token: pending.token,
      seq: pending.seq,
      outcome: random() < 0.8 ? { kind: "applied", applied: pending.set } : { kind: "failed", code: "DEVICE_ERROR", message: "timeout" },
    });
    if (random() < 0.7) return records.map((record) => ({ actuator, record })); // else group with the next step
  }
  if (s.fence.token === 0 || random() < 0.15) {
    records.push({ type: "granted", holder: pick(["ctl-a", "ctl-b"]), token: s.highestGranted + 1 });
  } else {
    const seq = s.fence.seq === null ? 0 : s.fence.seq + 1;
    const holder = s.recent.at(-1)?.holder ?? "ctl-a";
    records.push({ type: "intent", holder, token: s.fence.token, seq, set: { position: Math.floor(random() * 100) } });
  }
  return records.map((record) => ({ actuator, record }));
}

function pick<T>(xs: readonly T[]): T {
  return xs[Math.floor(random() * xs.length)]!;
}

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
