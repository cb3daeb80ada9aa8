/**
 * Commands that never wait for the disk, with real parts: the real daemon, real Mosquitto, the simulated fenced valve, the
 * real SQLite journal on disk, real process kills. A command's intent and outcome are an
 * asynchronous audit trail; grants stay durable before their reply.
 *
 *  (a) a command's reply does not wait for a journal commit, while a grant's does, and a
 *      grant's commit carries the audit records queued before it (figures from the daemon's
 *      own /api/status, with every fdatasync held back 1 s: bench/slow-disk.mjs);
 *  (b) SIGKILL with audit records not yet committed: the restart reads a consistent journal,
 *      the highest token is not lower, and the lost command's retry is a lease error;
 *  (c) an audit commit that stalls or fails stops the daemon with exit 74 and a sentence.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { AuditReader } from "../../../src/adapters/journal/audit.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { DaemonProcess, valve } from "../../support/daemon.ts";
import { freePort } from "../../support/ports.ts";
import { Teardown, startStack, stopDaemon, type Stack } from "../../support/stack.ts";

const A = "valve-1";
const teardown = new Teardown();
afterAll(() => teardown.run());

const moduleUrl = (path: string, query: string) => `${pathToFileURL(resolve(import.meta.dirname, path)).href}?${query}`;

function getJson(url: string): Promise<Json> {
  return new Promise((done, fail) => {
    http
      .get(url, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (c: string) => (body += c));
        res.on("end", () => done(JSON.parse(body)));
      })
      .on("error", fail);
  });
}

function getText(url: string): Promise<string> {
  return new Promise((done, fail) => {
    http
      .get(url, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (c: string) => (body += c));
        res.on("end", () => done(body));
      })
      .on("error", fail);
  });
}

async function valveStack(
  name: string,
  journal: Record<string, unknown>,
  options: { nodeArgs?: string[]; metricsPort?: number } = {},
): Promise<{ stack: Stack; ctl: TestController }> {
  const stack = await startStack(teardown, {
    name,
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", ...sim } },
      actuators: [valve(A, "sim", 1)],
      journal,
      ...(options.metricsPort ? { metricsPort: options.metricsPort } : {}),
    }),
    fenced: [A],
    ...(options.nodeArgs ? { nodeArgs: options.nodeArgs } : {}),
  });
  const ctl = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  return { stack, ctl };
}

describe("(a) a command's reply does not wait for the disk; a grant's does", () => {
  it("with every fdatasync held back 1 s and an audit lag of 3 s: the grant's reply follows its commit, the command's comes before any, and the next grant's commit carries the command's records", async () => {
    const port = await freePort();
    const { stack, ctl } = await valveStack(
      "audit-async",
      { auditLagMs: 3000 },
      { nodeArgs: ["--import", moduleUrl("../../../bench/slow-disk.mjs", "syncMs=1000")], metricsPort: port },
    );
    const lag = async () =>
      (await getJson(`http://127.0.0.1:${port}/api/status`)).gateway.journal.auditLag as {
        records: number;
        oldestMs: number;
        commits: number;
      };

    const beforeGrant = await lag();
    const granted = await ctl.acquire(A, 30_000);
    expect(granted).toMatchObject({ ok: true, lease: { holder: "line-a" } });
    const afterGrant = await lag();
    expect(afterGrant.commits, "the grant's commit came back before its reply").toBeGreaterThan(beforeGrant.commits);

    const token = granted.lease.token as number;
    expect(await ctl.command(A, token, 1, { position: 40 })).toMatchObject({ ok: true, outcome: "applied", token, seq: 1 });
    const afterCommand = await lag();
    // The reply is out, and its intent and outcome are still waiting for a commit (3 s lag + 1 s sync).
    expect(afterCommand.commits, "no commit between the grant's reply and the command's").toBe(afterGrant.commits);
    expect(afterCommand.records).toBeGreaterThanOrEqual(2);
    const metrics = await getText(`http://127.0.0.1:${port}/metrics`);
    expect(Number(/^fencegate_journal_lag_records (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(2);
    expect(Number(/^fencegate_journal_commits_total (\d+)$/m.exec(metrics)?.[1])).toBe(afterGrant.commits);
    expect(metrics).toMatch(/^fencegate_journal_lag_oldest_ms \d+$/m);

    // A grant within the lag: one commit carries the command's records and the grant, in order.
    expect(await ctl.request(A, "lease/release", { holder: "line-a", token })).toMatchObject({ ok: true });
    const other = teardown.add(await TestController.connect(stack.broker.url, "line-b"), (c) => c.close());
    expect(await other.acquire(A, 30_000)).toMatchObject({ ok: true, lease: { holder: "line-b", token: token + 1 } });
    const afterSecondGrant = await lag();
    expect(afterSecondGrant.commits).toBe(afterCommand.commits + 1);
    expect(afterSecondGrant.records).toBe(0);
    const trail = await getJson(`http://127.0.0.1:${port}/api/actuators/${A}/audit`);
    expect(trail.entries).toMatchObject([{ holder: "line-a", token, seq: 1, set: { position: 40 } }]);
  });
});

describe("(b) SIGKILL with the audit trail's newest records not yet committed", () => {
  it("the restart reads a consistent journal, the token is not lower, and the lost command's retry is LEASE_EXPIRED, not DUPLICATE", async () => {
    // A 5 s lag: the records of the commands below are still in the daemon's memory at the kill.
    const { stack, ctl } = await valveStack("audit-kill", { auditLagMs: 5000 });
    const granted = await ctl.acquire(A, 30_000);
    const token = granted.lease.token as number;
    for (let seq = 1; seq <= 3; seq++)
      expect(await ctl.command(A, token, seq, { position: 10 * seq })).toMatchObject({ ok: true, outcome: "applied" });
    expect(await stack.daemon.kill("SIGKILL")).toEqual({ code: null, signal: "SIGKILL" });

    const daemon = teardown.add(DaemonProcess.start(stack.dir, stack.config), (d) => stopDaemon(d));
    await daemon.ready([A]);
    expect(daemon.logs.find((l) => l.msg === "journal loaded" && l.actuator === A)).toMatchObject({ highestGranted: token });
    // Lost, as the contract says a crash may: the grant is on record, the commands are not.
    const reader = AuditReader.open(join(stack.dir, "journal.db"));
    expect(reader.page({ actuator: A, limit: 10 }).entries).toEqual([]);
    reader.close();

    const state = (await ctl.read(A)).state;
    expect(state.lease).toBeNull();
    expect(state.fence.token).toBe(token); // the device's own fence (token, 3) or the grant's: never lower
    expect(await ctl.command(A, token, 3, { position: 30 })).toMatchObject({ ok: false, error: { code: "LEASE_EXPIRED" } });
    expect(await ctl.command(A, token, 4, { position: 40 })).toMatchObject({ ok: false, error: { code: "LEASE_EXPIRED" } });
    expect(await ctl.acquire(A, 30_000)).toMatchObject({ ok: true, lease: { token: token + 1 } });
  });
});

describe("(c) an audit commit that stalls or fails stops the daemon (exit 74)", () => {
  it.each([
    ["stalls", "hang", /has not become durable within 500 ms \(journal\.commitStallMs\): the disk has stalled/],
    ["fails", "fail", /could not be synced to disk \(EIO/],
  ] as const)(
    "when the disk %s after the grant, the command is answered, then its audit commit stops the daemon with a sentence",
    async (_how, mode, sentence) => {
      const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-disk-")), (d) => rmSync(d, { recursive: true, force: true }));
      const trigger = join(dir, "disk-gone");
      const { stack, ctl } = await valveStack(
        `audit-${mode}`,
        { auditLagMs: 50, commitStallMs: 500 },
        { nodeArgs: ["--import", moduleUrl("../../support/failing-disk.mjs", `trigger=${encodeURIComponent(trigger)}&mode=${mode}`)] },
      );
      const granted = await ctl.acquire(A, 30_000);
      writeFileSync(trigger, "");
      expect(await ctl.command(A, granted.lease.token, 1, { position: 5 })).toMatchObject({ ok: true, outcome: "applied" });
      expect(await stack.daemon.exited).toEqual({ code: 74, signal: null });
      const fatal = stack.daemon.logs.find((l) => l.level === 60);
      expect(fatal).toMatchObject({ msg: "the journal could not commit; stopping all decisions" });
      expect(fatal!.err.message).toMatch(sentence);
      expect(fatal!.err.stack).toMatch(/\n    at /); // the stack, for whoever files the bug
    },
  );
});
