/**
 * A journal disk that stops answering (a real one: ext4 on a loop device, frozen with
 * fsfreeze) stops nothing but what must wait for it: the journal runs in a writer thread of
 * its own (src/adapters/journal/worker-client.ts), so the event loop answers the other
 * actuators' commands and /healthz, says 503 with the reason while the stall lasts, and the
 * stall exit (journal.commitStallMs) fires on time, not after the thaw. Needs root; skipped
 * without it.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { startSimulator } from "../../../firmware-bridge/src/simulator.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { openNotifySocket } from "../deploy/notify-socket.ts";
import { loopExt4, type FrozenDisk } from "../../support/frozen-disk.ts";
import { startMosquitto } from "../../support/mosquitto.ts";
import { freePort } from "../../support/ports.ts";
import { Teardown, stopDaemon } from "../../support/stack.ts";

const teardown = new Teardown();
afterAll(() => teardown.run());
afterEach(() => disk?.thaw()); // a failed test leaves no frozen disk to the next

const disk: FrozenDisk | null = loopExt4("stall");
if (disk !== null) teardown.add(disk, (d) => d.remove());

/** GET with a deadline: a daemon whose event loop is stuck does not answer at all. */
function get(url: string, timeoutMs: number): Promise<{ status: number; body: Json }> {
  return new Promise((done, fail) => {
    const req = http.get(url, { timeout: timeoutMs }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (c: string) => (body += c));
      res.on("end", () => done({ status: res.statusCode ?? 0, body: JSON.parse(body) }));
    });
    req.on("timeout", () => req.destroy(new Error(`no answer from ${url} within ${timeoutMs} ms`)));
    req.on("error", fail);
  });
}

async function until<T>(what: string, deadlineMs: number, probe: () => Promise<T | null>): Promise<T> {
  const end = performance.now() + deadlineMs;
  for (;;) {
    const got = await probe();
    if (got !== null) return got;
    if (performance.now() > end) throw new Error(`${what}: not within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function valves(name: string, journal: Record<string, unknown>, env: Record<string, string> = {}) {
  const dir = join(disk!.dir, name);
  mkdirSync(dir); // as the install makes the journal's directory: the daemon never does
  const broker = teardown.add(await startMosquitto(), (b) => b.stop());
  const sim = teardown.add(
    await startSimulator({ units: [1, 2, 3], rate: 0, profile: "fenced", tcp: { host: "127.0.0.1", port: 0 } }),
    (s) => s.close(),
  );
  const port = await freePort();
  const config = gatewayConfig({
    brokerUrl: broker.url,
    journalPath: join(dir, "journal.db"),
    buses: { sim: { type: "tcp", ...sim.tcp! } },
    actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2), valve("valve-3", "sim", 3)],
    journal,
    metricsPort: port,
  });
  // The configuration beside the test, not on the disk that freezes: only the journal is there.
  const configDir = teardown.add(mkdtempSync(join(tmpdir(), `fencegate-${name}-`)), (d) => rmSync(d, { recursive: true, force: true }));
  // The child inherits the environment at spawn: set it for this one spawn only.
  const saved = { ...process.env };
  Object.assign(process.env, env);
  let started: DaemonProcess;
  try {
    started = DaemonProcess.start(configDir, config);
  } finally {
    for (const key of Object.keys(env)) delete process.env[key];
    Object.assign(process.env, saved);
  }
  const daemon = teardown.add(started, async (d) => {
    await disk!.thaw(); // a daemon waiting on the frozen disk could not stop
    await stopDaemon(d);
  });
  await daemon.ready(["valve-1", "valve-2", "valve-3"]);
  const a = teardown.add(await TestController.connect(broker.url, "line-a"), (c) => c.close());
  const b = teardown.add(await TestController.connect(broker.url, "line-b"), (c) => c.close());
  const c = teardown.add(await TestController.connect(broker.url, "line-c"), (x) => x.close());
  const tokenA = (await a.acquire("valve-1", 60_000)).lease.token as number;
  const tokenB = (await b.acquire("valve-2", 60_000)).lease.token as number;
  return { daemon, a, b, c, tokenA, tokenB, healthz: `http://127.0.0.1:${port}/healthz` };
}

describe.skipIf(disk === null)("a journal disk that stops answering", () => {
  it("while it is frozen another actuator's commands are answered and /healthz says 503 with the reason; after the thaw, 200 and the waiting grant completes", async () => {
    const { daemon, a, b, c, tokenA, tokenB, healthz } = await valves("frozen", { commitStallMs: 10_000, auditLagMs: 50 });
    expect((await get(healthz, 1000)).status).toBe(200);

    disk!.freeze();
    const frozenAtMs = performance.now();
    // valve-1's command: its audit record's commit goes to the frozen disk and does not come back.
    expect(await a.command("valve-1", tokenA, 1, { position: 10 })).toMatchObject({ ok: true, outcome: "applied" });
    // A grant waits for the disk: its reply comes after the thaw.
    let granted: Json | null = null;
    const grant = c
      .request("valve-3", "lease/acquire", { holder: "line-c", ttlMs: 60_000 }, { timeoutMs: 15_000 })
      .then((reply) => (granted = reply));
    grant.catch(() => {}); // awaited below; a test failing before that leaves no unhandled rejection

    const unhealthy = await until("/healthz 503", 5000, async () => {
      const answer = await get(healthz, 1000); // answers at once: the event loop is free
      return answer.status === 503 ? answer : null;
    });
    expect(unhealthy.body.problem).toMatch(
      /has not come back from the disk for \d+\.\d s: the disk has stalled; commands are still answered, grants wait/,
    );
    expect(performance.now() - frozenAtMs).toBeLessThan(4000); // reported at 2 s (a quarter of commitStallMs, at most 2 s)

    // Still frozen: valve-2's commands are answered as they are without a stall.
    for (let seq = 1; seq <= 3; seq++) {
      const sentMs = performance.now();
      expect(await b.command("valve-2", tokenB, seq, { position: 20 * seq })).toMatchObject({ ok: true, outcome: "applied" });
      expect(performance.now() - sentMs).toBeLessThan(1000);
    }
    await daemon.waitForLog(
      (l) => l.level === 40 && l.component === "journal" && /the disk has stalled/.test(l.msg ?? ""),
      1000,
      "the stall's warning",
    );

    expect(granted, "a grant is not answered before its commit comes back").toBeNull();

    await disk!.thaw();
    await until("/healthz 200 after the thaw", 5000, async () => ((await get(healthz, 1000)).status === 200 ? true : null));
    await daemon.waitForLog((l) => l.msg === "the journal's disk answers again: commits complete", 5000);
    expect(await grant).toMatchObject({ ok: true, lease: { holder: "line-c" } });
    expect(daemon.child.exitCode).toBeNull();
  });

  it("with the systemd watchdog pinging, the event loop still answers from the freeze's first moment: no ping starts a process while the writer thread waits on the disk", async () => {
    const socket = teardown.add(await openNotifySocket(mkdtempSync(join(tmpdir(), "fencegate-notify-"))), (n) => n.close());
    // A ping every 200 ms: several fall due before the stall is reported (2 s) and pings stop.
    const { a, tokenA, healthz } = await valves(
      "watchdog",
      { commitStallMs: 10_000, auditLagMs: 50 },
      { NOTIFY_SOCKET: socket.path, WATCHDOG_USEC: "600000" },
    );
    await socket.waitFor("WATCHDOG=1", 5000);
    disk!.freeze();
    expect(await a.command("valve-1", tokenA, 1, { position: 10 })).toMatchObject({ ok: true, outcome: "applied" });
    for (const end = performance.now() + 2500; performance.now() < end;) {
      await get(healthz, 1000); // throws when the event loop is stuck
      await new Promise((r) => setTimeout(r, 50));
    }
    await disk!.thaw();
  });

  it("the stall exit fires on time while the disk is still frozen: the daemon stops deciding and says why at journal.commitStallMs, and exits 74", async () => {
    const { daemon, a, tokenA } = await valves("stall-exit", { commitStallMs: 2000, auditLagMs: 50 });
    disk!.freeze();
    expect(await a.command("valve-1", tokenA, 1, { position: 10 })).toMatchObject({ ok: true, outcome: "applied" });
    const answeredMs = performance.now();
    const fatal = await daemon.waitForLog((l) => l.level === 60, 5000, "the stall's fatal line");
    // The audit record's commit went out within the audit lag (50 ms) after the reply; the stall is declared commitStallMs after that.
    const tookMs = performance.now() - answeredMs;
    expect(tookMs).toBeGreaterThan(1900);
    expect(tookMs).toBeLessThan(3000);
    expect(fatal.err.message).toMatch(/has not become durable within 2000 ms \(journal\.commitStallMs\): the disk has stalled/);
    // The whole stop runs on the event loop (MQTT disconnect, HTTP closed), the disk still frozen.
    await daemon.waitForLog((l) => l.msg === "fencegate daemon stopped", 2000);
    // The process ends once the kernel lets the writer thread go: a thread waiting on a frozen
    // filesystem cannot be killed before the thaw (docs/deploy.md, "The journal's disk").
    await disk!.thaw();
    expect(await daemon.exited).toEqual({ code: 74, signal: null });
  });
});
