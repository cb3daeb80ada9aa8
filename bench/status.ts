/**
 * npm run bench:status: what the status page costs the gateway, measured in one run.
 *
 *   page weight   the bytes of /, /status.js and /status.css, plain and gzipped, and /api/status
 *   RSS           the daemon's resident set: idle with the status page off (a daemon of its own),
 *                 and on; with the page open in headless chromium
 *                 and its feed running under a stream of commands; with 50 event streams open
 *   latency       end-to-end command latency (a bare MQTT v5 controller, sequential commands)
 *                 with no event stream open (the floor of this run) and with 50 open, reading
 *
 * The daemon (dist/, built first if stale, as a production install runs it; log level info,
 * production V8 flags), Mosquitto and the simulated valve (its own process, Modbus TCP) are
 * real; the controller and the 50 readers run in this process.
 *
 *   npm run bench:status                 # 3 repeats of 2000 commands each
 *   npm run bench:status -- --quick      # 1 repeat of 500
 *
 * Results: a table on stdout, JSON in bench/results/status-<time>.json.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { DIST_MAIN, distIsFresh } from "../bin/dist.mjs";
import { CHROMIUM, chromiumInstalled, launchChromium } from "../test/support/chromium.ts";
import { TestController } from "../test/support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../test/support/daemon.ts";
import { FENCEGATE_BIN } from "../test/support/processes.ts";
import { startMosquitto } from "../test/support/mosquitto.ts";
import { freePort } from "../test/support/ports.ts";
import { startSimProcess } from "../test/support/sim-process.ts";
import { Teardown, stopDaemon } from "../test/support/stack.ts";

const FEEDS = 50;

const { values } = parseArgs({ options: { quick: { type: "boolean" } } });
const quick = values.quick ?? false;
const REPEATS = quick ? 1 : 3;
const COMMANDS = quick ? 500 : 2000;

interface Dist {
  readonly p50: number;
  readonly p99: number;
  readonly mean: number;
}

function dist(samples: readonly number[]): Dist {
  const s = [...samples].sort((x, y) => x - y);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { p50: at(0.5), p99: at(0.99), mean: s.reduce((x, y) => x + y, 0) / s.length };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.floor(s.length / 2)]!;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

/** The process's CPU time so far (user + system), ms: /proc/<pid>/stat fields 14 and 15, in clock ticks of 10 ms. */
function cpuMs(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function fetchBytes(url: string, gzip: boolean): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers: gzip ? { "accept-encoding": "gzip" } : {} }, (res) => {
        let n = 0;
        res.on("data", (c: Buffer) => (n += c.length));
        res.on("end", () => resolve(n));
      })
      .on("error", reject);
  });
}

/** An event-stream reader that keeps up (counts the bytes it receives). */
function openFeed(url: string): Promise<{ bytes: () => number; close: () => void }> {
  return new Promise((resolve, reject) => {
    let n = 0;
    const req = http.get(url, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`event stream refused: ${res.statusCode}`));
      res.on("data", (c: Buffer) => (n += c.length));
      resolve({ bytes: () => n, close: () => req.destroy() });
    });
    req.on("error", reject);
  });
}

async function main(): Promise<void> {
  if (!distIsFresh()) {
    console.log("dist/ is missing or older than the sources: npm run build");
    const built = spawnSync("npm", ["run", "build"], { encoding: "utf8" });
    if (built.status !== 0)
      console.log(`npm run build failed (${built.status}); the daemon runs through tsx\n${built.stdout}${built.stderr}`);
  }
  process.env["FENCEGATE_RUNTIME"] = fs.existsSync(DIST_MAIN) ? "dist" : "tsx";
  const teardown = new Teardown();
  try {
    const dir = teardown.add(fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-bench-status-")), (d) =>
      fs.rmSync(d, { recursive: true, force: true }),
    );
    const broker = teardown.add(await startMosquitto(), (b) => b.stop());
    const simPort = await freePort();
    const sim = await startSimProcess(FENCEGATE_BIN, ["--tcp", `127.0.0.1:${simPort}`, "--rate", "0"]);
    teardown.add(sim, async (s) => {
      s.child.kill("SIGTERM");
      await s.exited;
    });
    const httpPort = await freePort();
    const configWith = (statusPage: boolean) => ({
      ...gatewayConfig({
        brokerUrl: broker.url,
        journalPath: path.join(dir, statusPage ? "journal.db" : "journal-off.db"),
        buses: { sim: { type: "tcp", host: "127.0.0.1", port: simPort } },
        actuators: [valve("valve-1", "sim", 1, "fenced", { pollIntervalMs: 1000 })],
        metricsPort: httpPort,
        metrics: { statusPage: { enabled: statusPage, maxEventStreams: FEEDS + 8 } },
        leases: { maxTtlMs: 3_600_000 },
      }),
      logging: { level: "info" },
    });
    // The baseline: the same daemon with the page off, idle.
    const off = DaemonProcess.start(dir, configWith(false));
    await off.ready(["valve-1"]);
    await new Promise((r) => setTimeout(r, 1000));
    const offRss = rssMb(off.child.pid!);
    await stopDaemon(off);
    const config = configWith(true);
    const daemon = teardown.add(DaemonProcess.start(dir, config), (d) => stopDaemon(d));
    await daemon.ready(["valve-1"]);
    daemon.stopCollecting();
    const pid = daemon.child.pid!;
    const base = `http://127.0.0.1:${httpPort}`;

    // Page weight.
    const files = ["/", "/status.js", "/status.css"];
    const plain = await Promise.all(files.map((f) => fetchBytes(`${base}${f}`, false)));
    const gzipped = await Promise.all(files.map((f) => fetchBytes(`${base}${f}`, true)));
    const ctl = teardown.add(await TestController.connect(broker.url, "bench"), (c) => c.close());
    const token = (await ctl.acquire("valve-1", 3_600_000)).lease.token as number;
    let seq = 0;
    const run = async (n: number): Promise<number[]> => {
      const samples: number[] = [];
      for (let i = 0; i < n; i++) {
        const started = performance.now();
        const reply = await ctl.command("valve-1", token, ++seq, { position: seq % 100 });
        samples.push(performance.now() - started);
        if (!reply.ok) throw new Error(`command refused: ${JSON.stringify(reply)}`);
      }
      return samples;
    };
    await run(200); // warm-up
    const statusBytes = await fetchBytes(`${base}/api/status`, false);
    const idleRss = rssMb(pid);

    // The page in a browser, its feed running under commands.
    let pageRss = Number.NaN;
    if (chromiumInstalled()) {
      const context = await launchChromium(teardown);
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(base);
      await page.waitForFunction(
        () =>
          (globalThis as unknown as { document: { getElementById(id: string): { textContent: string } | null } }).document.getElementById(
            "gw-live",
          )?.textContent === "live",
      );
      const rss: number[] = [];
      const sampler = setInterval(() => rss.push(rssMb(pid)), 100);
      await run(COMMANDS);
      clearInterval(sampler);
      pageRss = Math.max(...rss);
      await context.close();
    } else console.error(`${CHROMIUM} is missing: the RSS with a browser page open is not measured (apt-get install chromium).`);

    // Latency with none and with 50 event streams, alternating, in the same run.
    const none: Dist[] = [];
    const fifty: Dist[] = [];
    const cpuNone: number[] = [];
    const cpuFifty: number[] = [];
    const measure = async (cpu: number[]): Promise<Dist> => {
      const before = cpuMs(pid);
      const d = dist(await run(COMMANDS));
      cpu.push((cpuMs(pid) - before) / COMMANDS);
      return d;
    };
    const fiftyRss: number[] = [];
    let streamedBytes = 0;
    for (let r = 0; r < REPEATS; r++) {
      none.push(await measure(cpuNone));
      const feeds = await Promise.all(Array.from({ length: FEEDS }, () => openFeed(`${base}/api/events`)));
      const rss: number[] = [];
      const sampler = setInterval(() => rss.push(rssMb(pid)), 100);
      fifty.push(await measure(cpuFifty));
      clearInterval(sampler);
      fiftyRss.push(Math.max(...rss));
      streamedBytes += feeds.reduce((n, f) => n + f.bytes(), 0);
      for (const f of feeds) f.close();
      await new Promise((res) => setTimeout(res, 200));
    }
    const floor = { p50: median(none.map((d) => d.p50)), p99: median(none.map((d) => d.p99)) };
    const loaded = { p50: median(fifty.map((d) => d.p50)), p99: median(fifty.map((d) => d.p99)) };

    const result = {
      at: new Date().toISOString(),
      commandsPerRepeat: COMMANDS,
      repeats: REPEATS,
      pageWeight: {
        files: Object.fromEntries(files.map((f, i) => [f, { bytes: plain[i], gzip: gzipped[i] }])),
        totalBytes: plain.reduce((x, y) => x + y, 0),
        totalGzip: gzipped.reduce((x, y) => x + y, 0),
        apiStatusBytes: statusBytes,
      },
      runtime: process.env["FENCEGATE_RUNTIME"],
      rssMb: { idlePageOff: offRss, idle: idleRss, pageOpenFeedRunning: pageRss, fiftyFeeds: median(fiftyRss) },
      daemonCpuMsPerCommand: { noFeeds: median(cpuNone), fiftyFeeds: median(cpuFifty) },
      latencyMs: { noFeeds: floor, fiftyFeeds: loaded, ratioP50: loaded.p50 / floor.p50, ratioP99: loaded.p99 / floor.p99 },
      streamedMbPerFeed: streamedBytes / FEEDS / REPEATS / 1e6,
    };
    const f2 = (x: number) => x.toFixed(2);
    console.log(`status page bench (${REPEATS} × ${COMMANDS} commands per case; the daemon runs from ${result.runtime})`);
    console.log(
      `  page weight      ${result.pageWeight.totalBytes} B (gzip ${result.pageWeight.totalGzip} B): ${files.map((f, i) => `${f} ${plain[i]}/${gzipped[i]}`).join(", ")}; /api/status ${statusBytes} B`,
    );
    console.log(
      `  daemon RSS       page off, idle ${f2(offRss)} MB; page on, after 200 commands ${f2(idleRss)} MB; page open, feed running ${f2(pageRss)} MB; ${FEEDS} feeds ${f2(result.rssMb.fiftyFeeds)} MB`,
    );
    console.log(
      `  command latency  no feeds p50 ${f2(floor.p50)} ms p99 ${f2(floor.p99)} ms (the floor); ${FEEDS} feeds p50 ${f2(loaded.p50)} ms p99 ${f2(loaded.p99)} ms (×${f2(result.latencyMs.ratioP50)} p50, ×${f2(result.latencyMs.ratioP99)} p99)`,
    );
    console.log(
      `  daemon CPU       per command (user + system): no feeds ${result.daemonCpuMsPerCommand.noFeeds.toFixed(3)} ms; ${FEEDS} feeds ${result.daemonCpuMsPerCommand.fiftyFeeds.toFixed(3)} ms`,
    );
    const out = path.join(import.meta.dirname, "results", `status-${result.at.replace(/[:.]/g, "-")}.json`);
    fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    console.log(`  ${path.relative(process.cwd(), out)}`);
  } finally {
    await teardown.run();
  }
}

await main();
