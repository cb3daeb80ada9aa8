/**
 * A command's latency, and /healthz's, while the journal's disk is frozen (docs/deploy.md,
 * "The journal's disk"): two fenced valves on the simulator, the journal on a loop-mounted
 * ext4 frozen with fsfreeze for --freeze-ms (7 s, the figure docs/deploy.md gives), a command on valve-1 just after the
 * freeze (its audit commit goes to the frozen disk), then valve-2's controller sends one
 * command after another and /healthz is asked, until the thaw. Needs root.
 *
 *   npx tsx bench/journal-stall.ts [--bin <fencegate.mjs of another checkout>] [--freeze-ms 7000]
 */
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSimulator } from "../firmware-bridge/src/simulator.ts";
import { TestController } from "../test/support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../test/support/daemon.ts";
import { FENCEGATE_BIN } from "../test/support/processes.ts";
import { loopExt4 } from "../test/support/frozen-disk.ts";
import { startMosquitto } from "../test/support/mosquitto.ts";
import { freePort } from "../test/support/ports.ts";
import { Teardown, stopDaemon } from "../test/support/stack.ts";

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
const bin = arg("--bin") ?? FENCEGATE_BIN;
const freezeMs = Number(arg("--freeze-ms") ?? 7000);

function healthz(url: string, timeoutMs: number): Promise<string> {
  return new Promise((done) => {
    const req = http.get(url, { timeout: timeoutMs }, (res) => {
      res.resume();
      res.on("end", () => done(String(res.statusCode)));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", () => done("no answer"));
  });
}

const pct = (xs: number[], p: number) => [...xs].sort((x, y) => x - y)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))] ?? NaN;

const teardown = new Teardown();
try {
  const disk = loopExt4("bench-stall");
  if (disk === null) throw new Error("needs root and loop devices");
  teardown.add(disk, (d) => d.remove());
  const broker = teardown.add(await startMosquitto(), (b) => b.stop());
  const sim = teardown.add(await startSimulator({ units: [1, 2], rate: 0, profile: "fenced", tcp: { host: "127.0.0.1", port: 0 } }), (s) =>
    s.close(),
  );
  const port = await freePort();
  const config = gatewayConfig({
    brokerUrl: broker.url,
    journalPath: join(disk.dir, "journal.db"),
    buses: { sim: { type: "tcp", ...sim.tcp! } },
    actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2)],
    metricsPort: port,
  });
  config["logging"] = { level: "info" };
  const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-bench-stall-")), (d) => rmSync(d, { recursive: true, force: true }));
  const daemon = teardown.add(DaemonProcess.start(dir, config, { bin }), async (d) => {
    await disk.thaw();
    await stopDaemon(d);
  });
  await daemon.ready(["valve-1", "valve-2"]);
  const a = teardown.add(await TestController.connect(broker.url, "line-a"), (c) => c.close());
  const b = teardown.add(await TestController.connect(broker.url, "line-b"), (c) => c.close());
  const tokenA = (await a.acquire("valve-1", 60_000)).lease.token as number;
  const tokenB = (await b.acquire("valve-2", 60_000)).lease.token as number;
  let seqB = 0;
  const commandB = async (timeoutMs: number) => {
    const sent = performance.now();
    const reply = await b.request(
      "valve-2",
      "command",
      { holder: "line-b", token: tokenB, seq: ++seqB, set: { position: seqB % 100 } },
      { timeoutMs },
    );
    if (reply.ok !== true) throw new Error(`valve-2's command refused: ${JSON.stringify(reply)}`);
    return performance.now() - sent;
  };
  const quiet: number[] = [];
  for (let i = 0; i < 30; i++) quiet.push(await commandB(5000));

  disk.freeze();
  const frozenAt = performance.now();
  let thawed = false;
  const thaw = new Promise<void>((resolve) => setTimeout(() => void disk.thaw().then(() => ((thawed = true), resolve())), freezeMs));
  await a.command("valve-1", tokenA, 1, { position: 10 });
  await new Promise((r) => setTimeout(r, 300)); // the audit lag (200 ms) passes: a commit is at the disk
  const stalled: number[] = [];
  const health: string[] = [];
  while (!thawed) {
    const latency = await commandB(freezeMs + 10_000);
    if (!thawed) stalled.push(latency);
    else console.log(`valve-2's command sent during the freeze was answered after the thaw: ${latency.toFixed(0)} ms`);
    const h0 = performance.now();
    const status = thawed ? "thawed" : await healthz(`http://127.0.0.1:${port}/healthz`, 1000);
    health.push(`${status}@${Math.round(performance.now() - frozenAt)}ms(${Math.round(performance.now() - h0)}ms)`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await thaw;
  const fmt = (xs: number[]) =>
    `n=${xs.length} median ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms, max ${Math.max(...xs).toFixed(1)} ms`;
  console.log(`daemon: ${bin}`);
  console.log(`valve-2's command, disk quiet:            ${fmt(quiet)}`);
  console.log(`valve-2's command, disk frozen ${freezeMs} ms: ${fmt(stalled)}`);
  const first = health.findIndex((h) => h.startsWith("503"));
  console.log(
    `/healthz during the freeze (status@since-freeze(latency)): first 3 ${health.slice(0, 3).join(" ")}; first 503: ${first < 0 ? "none" : health[first]}; last ${health.at(-1)}`,
  );
} finally {
  await teardown.run();
}
