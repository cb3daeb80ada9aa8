/**
 * npm run bench:group: a gateway group's failover and grant latency, measured on real parts
 * (etcd-server, Mosquitto, two gateway daemons from one bundle, the simulated fenced valve
 * over Modbus TCP), against floors measured in the same run.
 *
 * Failover, per repeat: a controller commands the active gateway every 20 ms (a fresh
 * lease whenever it learns its lease is over); the active gateway is SIGKILLed; the time
 * to the first command applied through the other gateway is taken apart by the new active
 * gateway's log: kill → "taking over" (the etcd lease runs out, the standby's next look,
 * its campaign), → "serving" (buses opened, device fence read and raised, tokens committed
 * in etcd and the journal), → first applied (the controller's next command is refused as
 * stale, it acquires anew and commands).
 *
 * Grant latency: acquire + release cycles (each acquire a new token) against the group's
 * active gateway, and against a gateway on its own on the same machine, with the floor of
 * one etcd transaction (the group's commit) beside them.
 *
 *   npm run bench:group                      # TTL 2 s and 5 s, 5 failovers each
 *   npm run bench:group -- --ttl-ms 3000 --repeats 3 --grants 300
 *
 * Results: a table on stdout, JSON in bench/results/group-<time>.json.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { EtcdClient } from "../src/adapters/etcd/client.ts";
import { TestController } from "../test/support/controller.ts";
import { DaemonProcess, gatewayConfig, valve, type LogLine } from "../test/support/daemon.ts";
import { GATEWAYS, VALVE, isServing, startGroup, type GroupStack } from "../test/support/group.ts";
import { Teardown, stopDaemon } from "../test/support/stack.ts";
import { until } from "../test/support/watch.ts";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

interface Spread {
  readonly p50: number;
  readonly p99: number;
  readonly min: number;
  readonly max: number;
}

function spread(xs: readonly number[]): Spread {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
  return { p50: at(0.5), p99: at(0.99), min: s[0] ?? Number.NaN, max: s.at(-1) ?? Number.NaN };
}

interface Failover {
  readonly killToTakeoverMs: number;
  readonly takeoverToServingMs: number;
  readonly servingToAppliedMs: number;
  readonly totalMs: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The wall-clock time (ms) of a daemon's log line: pino's `time`, on this machine's clock. */
function at(line: LogLine | undefined): number {
  return typeof line?.time === "number" ? line.time : Number.NaN;
}

/**
 * A controller that keeps commanding the active gateway: a command every `gapMs` under its
 * lease, a new lease when it learns the old one is over. Records when commands were applied.
 */
class Commander {
  private stopped = false;
  private token = 0;
  private seq = 0;
  readonly applied: { wallMs: number; token: number }[] = [];
  private readonly done: Promise<void>;

  constructor(
    private readonly ctl: TestController,
    private readonly gapMs: number,
  ) {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        if (this.token === 0) {
          const r = await this.ctl.request(VALVE, "lease/acquire", { holder: this.ctl.holder, ttlMs: 60_000 }, { timeoutMs: 300 });
          if (r.ok) this.token = r.lease.token as number;
          else await sleep(this.gapMs);
          continue;
        }
        const r = await this.ctl.request(
          VALVE,
          "command",
          { holder: this.ctl.holder, token: this.token, seq: ++this.seq, set: { position: this.seq % 100 } },
          { timeoutMs: 300 },
        );
        if (r.ok) this.applied.push({ wallMs: Date.now(), token: this.token });
        else if (["STALE_TOKEN", "LEASE_EXPIRED", "NOT_HOLDER", "UNKNOWN_TOKEN"].includes(r.error.code as string)) this.token = 0;
      } catch {
        // No reply (nobody serves during the failover): try again.
      }
      await sleep(this.gapMs);
    }
  }

  firstAppliedAfter(wallMs: number, aboveToken: number): number | undefined {
    return this.applied.find((a) => a.wallMs > wallMs && a.token > aboveToken)?.wallMs;
  }

  get lastToken(): number {
    return this.applied.at(-1)?.token ?? 0;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

async function failovers(group: GroupStack, ctl: TestController, repeats: number, say: (s: string) => void): Promise<Failover[]> {
  const results: Failover[] = [];
  for (let i = 0; i < GATEWAYS.length; i++) group.start(i);
  let active = await group.waitActive(30_000);
  for (let r = 0; r < repeats; r++) {
    const standby = 1 - active;
    await group.daemons[standby]!.waitForLog(
      (l) => l.msg === "the group's leader key is held by another gateway; standing by",
      30_000,
      "the standby standing by",
    );
    const commander = new Commander(ctl, 20);
    await until(() => commander.applied.length >= 5, { timeoutMs: 10_000, what: "commands applied before the kill" });
    const tokenBefore = commander.lastToken;
    await sleep(Math.random() * group.leaseTtlMs); // any phase of the renewal cycle
    const killWallMs = Date.now();
    await group.daemons[active]!.kill("SIGKILL");
    const next = group.daemons[standby]!;
    await group.waitActive(group.leaseTtlMs + 10_000, [standby]);
    await until(() => commander.firstAppliedAfter(killWallMs, tokenBefore), {
      timeoutMs: 10_000,
      what: "a command applied through the new active gateway",
    });
    const appliedWallMs = commander.firstAppliedAfter(killWallMs, tokenBefore)!;
    await commander.stop();
    const takeover = at(next.logs.findLast((l) => l.msg === "this gateway holds the group's leader key; taking over"));
    const serving = at(next.logs.findLast(isServing));
    const f: Failover = {
      killToTakeoverMs: takeover - killWallMs,
      takeoverToServingMs: serving - takeover,
      servingToAppliedMs: appliedWallMs - serving,
      totalMs: appliedWallMs - killWallMs,
    };
    results.push(f);
    say(
      `  failover ${r + 1}/${repeats}: ${f.totalMs} ms (kill→taking over ${f.killToTakeoverMs}, →serving ${f.takeoverToServingMs}, →first applied ${f.servingToAppliedMs})`,
    );
    group.start(active); // the killed one comes back as the standby
    active = standby;
  }
  await Promise.all(group.daemons.map((d) => (d ? stopDaemon(d) : undefined)));
  return results;
}

async function grantLatency(ctl: TestController, n: number): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < n + 20; i++) {
    const t0 = performance.now();
    const r = await ctl.request(VALVE, "lease/acquire", { holder: ctl.holder, ttlMs: 60_000 });
    const dt = performance.now() - t0;
    if (!r.ok) throw new Error(`acquire refused: ${JSON.stringify(r.error)}`);
    if (i >= 20) ms.push(dt); // after a warm-up
    await ctl.request(VALVE, "lease/release", { holder: ctl.holder, token: r.lease.token });
  }
  return ms;
}

async function etcdTxnFloor(endpoints: readonly string[], n: number): Promise<number[]> {
  const client = new EtcdClient({ endpoints, requestTimeoutMs: 2000 });
  const ms: number[] = [];
  try {
    for (let i = 1; i <= n + 20; i++) {
      const t0 = performance.now();
      await client.txn(
        [{ key: "/bench/floor", target: "MOD", result: "EQUAL", modRevision: 0 }],
        [{ put: { key: "/bench/floor", value: String(i) } }],
        [{ put: { key: "/bench/floor", value: String(i) } }],
      );
      if (i > 20) ms.push(performance.now() - t0);
    }
  } finally {
    client.close();
  }
  return ms;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      "ttl-ms": { type: "string" },
      repeats: { type: "string", default: "5" },
      grants: { type: "string", default: "200" },
    },
  });
  const ttls = values["ttl-ms"] !== undefined ? [Number(values["ttl-ms"])] : [2000, 5000];
  const repeats = Number(values.repeats);
  const grants = Number(values.grants);
  const say = (s: string) => console.log(s);
  const out: Record<string, unknown> = { at: new Date().toISOString(), ttls, repeats, grants, failover: {} };

  for (const ttl of ttls) {
    const teardown = new Teardown();
    try {
      say(`failover with an etcd lease TTL of ${ttl} ms (margin ${Math.min(1000, ttl / 4)} ms):`);
      const group = await startGroup(teardown, { name: `bench-${ttl}`, leaseTtlMs: ttl, selfFenceMarginMs: Math.min(1000, ttl / 4) });
      const ctl = teardown.add(await TestController.connect(group.broker.url, "bench"), (c) => c.close());
      const runs = await failovers(group, ctl, repeats, say);
      (out.failover as Record<string, unknown>)[String(ttl)] = {
        runs,
        totalMs: spread(runs.map((f) => f.totalMs)),
        killToTakeoverMs: spread(runs.map((f) => f.killToTakeoverMs)),
        takeoverToServingMs: spread(runs.map((f) => f.takeoverToServingMs)),
        servingToAppliedMs: spread(runs.map((f) => f.servingToAppliedMs)),
      };
    } finally {
      await teardown.run();
    }
  }

  say(`grant latency, ${grants} acquires each:`);
  const teardown = new Teardown();
  try {
    const group = await startGroup(teardown, { name: "bench-grants", leaseTtlMs: 5000, selfFenceMarginMs: 1000 });
    const ctl = teardown.add(await TestController.connect(group.broker.url, "bench"), (c) => c.close());
    group.start(0);
    await group.waitActive(30_000, [0]);
    const inGroup = await grantLatency(ctl, grants);
    await stopDaemon(group.daemons[0]!);
    const floor = await etcdTxnFloor(group.etcd.endpoints, grants);
    // The same gateway on its own: no group section, the same broker, device and disk.
    const alone = DaemonProcess.start(
      path.join(group.dir, "gw-a"),
      gatewayConfig({
        brokerUrl: group.broker.url,
        journalPath: path.join(group.dir, "alone.db"),
        buses: { plc: { type: "tcp", host: "127.0.0.1", port: group.sim.tcp!.port } },
        actuators: [valve(VALVE, "plc", 1)],
      }),
    );
    teardown.add(alone, (d) => stopDaemon(d));
    await alone.ready([VALVE], 30_000);
    const single = await grantLatency(ctl, grants);
    out.grants = { group: spread(inGroup), single: spread(single), etcdTxnFloor: spread(floor) };
  } finally {
    await teardown.run();
  }

  const f = (s: Spread) => `p50 ${s.p50.toFixed(2)}  p99 ${s.p99.toFixed(2)}  [${s.min.toFixed(2)}–${s.max.toFixed(2)}]`;
  say("\n=== gateway group ===");
  for (const ttl of ttls) {
    const r = (out.failover as Record<string, Record<string, Spread>>)[String(ttl)]!;
    say(`failover, TTL ${ttl} ms (kill → first command applied through the other gateway), ms:`);
    say(`  total                      ${f(r.totalMs!)}`);
    say(`  kill → taking over         ${f(r.killToTakeoverMs!)}   (lease expiry, a look, the campaign)`);
    say(`  taking over → serving      ${f(r.takeoverToServingMs!)}   (bus, device fence raised, tokens committed)`);
    say(`  serving → first applied    ${f(r.servingToAppliedMs!)}   (the controller learns its lease is over, acquires, commands)`);
  }
  const g = out.grants as Record<string, Spread>;
  say(`grant (acquire) latency, ms:`);
  say(`  gateway on its own         ${f(g.single!)}`);
  say(`  gateway group, active      ${f(g.group!)}`);
  say(`  floor: one etcd txn        ${f(g.etcdTxnFloor!)}`);
  say(`  group - alone, p50         ${(g.group!.p50 - g.single!.p50).toFixed(2)} ms`);
  const file = path.join(repo, "bench/results", `group-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  fs.writeFileSync(file, JSON.stringify(out, null, 2));
  say(`\nresults: ${path.relative(repo, file)}`);
}

await main();
process.exit(0);
