/**
 * `fencegate log` against the journal of a real daemon (real Mosquitto, the simulated
 * valves over Modbus TCP), read while the daemon keeps committing: the reader never blocks
 * a commit, never sees a torn state, and the journal is whole afterwards. Commands' records
 * reach the journal within the audit lag: a test reads the trail once the
 * daemon's /metrics says nothing is waiting for a commit. `fencegate log` runs bundled, as
 * `npm run build` ships it (the tsx start costs more than a reader's work, many times over).
 */
import http from "node:http";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import type { SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { TestController } from "../../support/controller.ts";
import { bundleCli } from "../../support/bundle.ts";
import { valve, type DaemonProcess } from "../../support/daemon.ts";
import { freePort } from "../../support/ports.ts";
import { runFencegate, type Run } from "../../support/processes.ts";
import { Teardown, daemonReport, startStack, stopDaemon } from "../../support/stack.ts";

const teardown = new Teardown();
let dir: string;
let journal: string;
let daemon: DaemonProcess;
let sim: SimulatorHandle;
let a: TestController;
let b: TestController;
let metricsPort: number;
let bin: string;

/** Resolves once no journal record waits for its commit: every command replied so far is in the trail. */
async function trailDurable(): Promise<void> {
  const waiting = () =>
    new Promise<number>((resolve, reject) => {
      http
        .get(`http://127.0.0.1:${metricsPort}/metrics`, (res) => {
          let body = "";
          res.setEncoding("utf8").on("data", (c: string) => (body += c));
          res.on("end", () => resolve(Number(/^fencegate_journal_lag_records (\d+)$/m.exec(body)?.[1] ?? NaN)));
        })
        .on("error", reject);
    });
  let last = Number.NaN;
  for (let i = 0; i < 100 && (last = await waiting()) !== 0; i++) await new Promise((r) => setTimeout(r, 20));
  expect(last, "journal records still waiting for a commit").toBe(0);
}

function log(...args: string[]): Promise<Run> {
  return runFencegate(["log", ...args], { bin, timeoutMs: 30_000, env: { FENCEGATE_CONFIG: "" } });
}

type Entry = {
  id: number;
  at: string | null;
  holder: string;
  token: number;
  seq: number;
  set: Record<string, number>;
  outcome: { kind: string; code?: string };
};

async function logJson(...args: string[]): Promise<Entry[]> {
  const run = await log("--journal", journal, "--json", ...args);
  expect(run, run.stderr).toMatchObject({ code: 0 });
  return JSON.parse(run.stdout) as Entry[];
}

beforeAll(async () => {
  bin = teardown.add(await bundleCli(), (b) => b.remove()).bin;
  metricsPort = await freePort();
  const stack = await startStack(teardown, {
    name: "log",
    sim: () => ({ units: [1, 2], rate: 0 }),
    gateway: ({ host, port }) => ({
      buses: { sim: { type: "tcp", host, port, timeoutMs: 300 } },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2, "fenced", { pollIntervalMs: 3_600_000 })],
      // Every command of the run stays on record; a commit every other audit record (about one
      // per command), so a checkpoint every 128 commits happens several times.
      commands: { recentLimit: 1000 },
      journal: { auditLagRecords: 2 },
      metricsPort,
    }),
    fenced: ["valve-1", "valve-2"],
  });
  ({ dir, daemon, sim } = stack);
  journal = join(dir, "journal.db");
  a = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  b = teardown.add(await TestController.connect(stack.broker.url, "line-b"), (c) => c.close());
});

afterAll(() => teardown.run());

describe("fencegate log", () => {
  it("reads the trail while the daemon keeps committing, without blocking it or seeing a torn state", async () => {
    const COMMANDS = 200; // 200 commits or more: the journal checkpoints (every 128) under the held snapshot
    const { lease } = await a.acquire("valve-1", 60_000);
    // A reader that holds one snapshot open for the whole run: SQLite's WAL lets the daemon
    // commit (and checkpoint) past it, and the snapshot does not move.
    const held = new Database(journal, { readonly: true, fileMustExist: true });
    held.exec("BEGIN");
    const count = () => (held.prepare("SELECT count(*) AS n FROM commands").get() as { n: number }).n;
    const heldCount = count();

    let done = false;
    let slowestMs = 0;
    let sent = 0;
    const reads: Entry[][] = [];
    sim.setDelay(2); // commands no longer wait for the disk: paced, so that reads overlap them
    const commanding = (async () => {
      // At least COMMANDS, and on until two reads have overlapped them (within recentLimit).
      for (let seq = 1; seq <= COMMANDS || (reads.length < 2 && seq < 900); seq++) {
        sent = seq;
        const started = performance.now();
        const reply = await a.command("valve-1", lease.token, seq, { position: seq % 100 });
        slowestMs = Math.max(slowestMs, performance.now() - started);
        expect(reply, daemonReport(daemon)).toMatchObject({ ok: true, outcome: "applied", seq });
      }
      done = true;
    })();
    while (!done) {
      const entries = await logJson("valve-1", "--limit", "1000");
      reads.push(entries);
      // Newest first, each seq once, every outcome one the journal may hold.
      const seqs = entries.map((e) => e.seq);
      expect(seqs).toEqual([...seqs].sort((x, y) => y - x));
      expect(new Set(seqs).size).toBe(seqs.length);
      for (const e of entries) expect(["applied", "pending"]).toContain(e.outcome.kind);
    }
    await commanding;
    sim.setDelay(0);
    expect(reads.length).toBeGreaterThanOrEqual(2);
    // Each later read saw at least as much as the one before: snapshots only move forward.
    for (let i = 1; i < reads.length; i++) expect(reads[i]!.length).toBeGreaterThanOrEqual(reads[i - 1]!.length);
    expect(count()).toBe(heldCount);
    held.exec("COMMIT");
    await trailDurable();
    expect(count()).toBeGreaterThanOrEqual(heldCount + sent);
    held.close();
    expect(slowestMs).toBeLessThan(2000);
    expect(daemon.logs.filter((l) => /journal/i.test(String(l.msg)) && l.level >= 50)).toEqual([]);

    // All of them, in the order they were applied.
    const final = (await logJson("valve-1", "--limit", "1000")).filter((e) => e.token === lease.token);
    expect(final.map((e) => e.seq)).toEqual(Array.from({ length: sent }, (_, i) => sent - i));
    expect(final.every((e) => e.outcome.kind === "applied" && e.holder === "line-a" && e.at !== null)).toBe(true);
    expect(final[0]!.set).toEqual({ position: sent % 100 });
  });

  it("filters by holder, outcome and time, and prints a table for people", async () => {
    const { lease: la } = await a.acquire("valve-2", 2_000);
    expect(await a.command("valve-2", la.token, 1, { position: 11 })).toMatchObject({ ok: true });
    sim.answerException(2, 1, 2, 16); // the next command block is refused: DEVICE_ERROR
    expect(await a.command("valve-2", la.token, 2, { position: 12 })).toMatchObject({ ok: false, error: { code: "DEVICE_ERROR" } });
    await a.request("valve-2", "lease/release", { holder: "line-a", token: la.token });
    const { lease: lb } = await b.acquire("valve-2", 2_000);
    expect(await b.command("valve-2", lb.token, 7, { position: 77 })).toMatchObject({ ok: true });
    await trailDurable();

    expect((await logJson("valve-2")).map((e) => [e.holder, e.seq])).toEqual([
      ["line-b", 7],
      ["line-a", 2],
      ["line-a", 1],
    ]);
    expect((await logJson("valve-2", "--holder", "line-a")).map((e) => e.seq)).toEqual([2, 1]);
    expect((await logJson("valve-2", "--outcome", "DEVICE_ERROR")).map((e) => e.seq)).toEqual([2]);
    expect((await logJson("valve-2", "--outcome", "failed")).map((e) => e.seq)).toEqual([2]);
    expect((await logJson("valve-2", "--outcome", "applied", "--holder", "line-b")).map((e) => e.seq)).toEqual([7]);
    expect(await logJson("valve-2", "--since", new Date(Date.now() + 60_000).toISOString())).toEqual([]);
    expect((await logJson("valve-2", "--since", "10m")).length).toBe(3);
    const limited = await log("valve-2", "--journal", journal, "--limit", "1");
    expect(limited.stderr).toMatch(/older commands match too/);

    const table = await log("valve-2", "--journal", journal);
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^TIME\s+HOLDER\s+TOKEN\s+SEQ\s+SET\s+OUTCOME$/);
    expect(lines[1]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\s+line-b\s+\d+\s+7\s+position=77\s+applied$/);
    expect(lines[2]).toMatch(/line-a\s+\d+\s+2\s+position=12\s+DEVICE_ERROR \(modbus 2\)$/);
  });

  it("takes the journal from the daemon's configuration", async () => {
    const config = join(dir, "log-config.yaml");
    writeFileSync(
      config,
      stringify({
        gatewayId: "x",
        mqtt: { url: "mqtt://127.0.0.1:1" },
        buses: { s: { type: "tcp", host: "127.0.0.1" } },
        actuators: [valve("valve-2", "s", 1)],
        journal: { path: journal },
      }),
    );
    const run = await log("valve-2", "--config", config, "--json", "--limit", "1");
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toHaveLength(1);
  });

  it.each([
    ["no actuator", [], 64, /name the actuator/],
    ["no journal", ["valve-1"], 64, /--config FILE \(the daemon's\) or --journal FILE/],
    ["a bad actuator id", ["Valve 1", "--journal", "j.db"], 64, /not an actuator id/],
    ["a limit above the page", ["valve-1", "--journal", "j.db", "--limit", "1001"], 64, /--limit must be a whole number from 1 to 1000/],
    ["a limit that is not a number", ["valve-1", "--journal", "j.db", "--limit", "1e3"], 64, /--limit/],
    ["an unknown outcome", ["valve-1", "--journal", "j.db", "--outcome", "ok"], 64, /--outcome must be one of applied, failed, pending/],
    ["a bad holder", ["valve-1", "--journal", "j.db", "--holder", "op 1"], 64, /--holder must be/],
    ["a bad --since", ["valve-1", "--journal", "j.db", "--since", "yesterday"], 64, /--since must be a date and time/],
    ["an unknown option", ["valve-1", "--journal", "j.db", "--follow"], 64, /unknown option "--follow"/],
    ["a missing journal", ["valve-1", "--journal", "/nonexistent/journal.db"], 66, /cannot be opened .*check journal.path/],
  ])("refuses %s with a sentence", async (_what, args, code, message) => {
    const run = await log(...args);
    expect(run.code).toBe(code);
    expect(run.stderr).toMatch(message);
  });

  it("keeps a usage error to two lines: what is wrong, and the usage", async () => {
    const run = await log("valve-1", "--journal", "j.db", "--limit", "0");
    expect(run.code).toBe(64);
    expect(run.stderr).toBe(
      "fencegate log: --limit must be a whole number from 1 to 1000\nusage: fencegate log ACTUATOR (--config FILE | --journal FILE) [options]  (`fencegate log --help` for the options)\n",
    );
  });

  it("says which actuators the journal has when asked for another", async () => {
    const run = await log("valve-9", "--journal", journal);
    expect(run.code).toBe(5);
    expect(run.stderr).toMatch(/no actuator "valve-9" in .* \(on record: valve-1, valve-2\)/);
  });

  it("leaves a journal the daemon opens again, whole", async () => {
    await stopDaemon(daemon);
    const reopened = openSqliteJournal({ path: journal, recentLimit: 1000 });
    expect(reopened.load().get("valve-1")!.recent.length).toBeGreaterThanOrEqual(200);
    reopened.close();
  });
});
