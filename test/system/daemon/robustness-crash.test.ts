/**
 * The daemon killed with SIGKILL mid-command, again and again, while a controller streams
 * commands; and stopped with SIGTERM. Real Mosquitto, the real daemon process, the real
 * SQLite journal on disk, the simulated fenced actuator (Modbus TCP), real process kills.
 *
 * After every restart: no token is reissued, the fence's token is not lower, every lease is
 * gone, and no command of the old lease reaches the device again. A command's record is an asynchronous audit trail (issue
 * 14): a kill may lose its newest records, so a retry of the interrupted command, or of the
 * last confirmed one, is DUPLICATE (its record survived) or LEASE_EXPIRED (lost), never
 * accepted again; the trail has no holes (a DUPLICATE for the interrupted command means the
 * confirmed one before it is on record too). A clean stop commits the whole trail.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { TopicWatcher, tcpNoDelay, until } from "../../support/watch.ts";

const LIVES = 5;
const A = "valve-1";
const STATUS_TOPIC = "fencegate/gateway/test/status";

// A small seeded PRNG (mulberry32): a failing run can be replayed with FENCEGATE_SEED.
const SEED = Number(process.env.FENCEGATE_SEED ?? Date.now() % 2 ** 31);
let rngState = SEED;
function random(): number {
  rngState = (rngState + 0x6d2b79f5) | 0;
  let t = rngState;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

let dir: string;
let broker: Broker | undefined;
let sim: SimulatorHandle | undefined;
let daemon: DaemonProcess | undefined;
let ctl: TestController | undefined;
let watcher: TopicWatcher | undefined;
let config: Record<string, unknown>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-crash-"));
  broker = await startMosquitto();
  sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], rate: 0 });
  config = gatewayConfig({
    brokerUrl: broker.url,
    journalPath: join(dir, "journal.db"),
    // A reply held back by the simulator (setDelay) must not be a timeout: the kill is what ends it.
    buses: { sim: { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 3000 } },
    actuators: [valve(A, "sim", 1)],
    commands: { defaultDeadlineMs: 10_000, maxDeadlineMs: 10_000 },
  });
  ctl = await TestController.connect(broker.url, "streamer");
  tcpNoDelay(ctl.client);
  watcher = await TopicWatcher.connect(broker.url, [STATUS_TOPIC]);
});

afterAll(async () => {
  await daemon?.kill("SIGKILL");
  await Promise.allSettled([ctl?.close(), watcher?.close()]);
  await sim?.close();
  await broker?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function startDaemon(): Promise<DaemonProcess> {
  daemon = DaemonProcess.start(dir, config);
  await daemon.ready([A]);
  return daemon;
}

interface Sent {
  readonly token: number;
  readonly seq: number;
  readonly position: number;
  reply?: Json;
}

/** Streams commands one after another until `stop` is set; replies owed to a killed daemon are abandoned. */
function stream(c: TestController, token: number, sent: Sent[], control: { stop: boolean; stopped: Promise<void> }): Promise<void> {
  return (async () => {
    for (let seq = 0; !control.stop; seq++) {
      const s: Sent = { token, seq, position: seq % 101 };
      sent.push(s);
      const reply = await Promise.race([
        c.command(A, token, seq, { position: s.position }).catch(() => undefined),
        control.stopped.then(() => undefined),
      ]);
      if (reply === undefined) return;
      s.reply = reply;
      // Nothing is refused while the lease lives and the device answers within the deadline.
      expect(reply, JSON.stringify(reply)).toMatchObject({ ok: true, outcome: "applied", token, seq });
    }
  })();
}

describe("the daemon killed with SIGKILL mid-command", () => {
  it(`loses no decision over ${LIVES} kills at random moments while a controller streams commands`, async () => {
    console.info(`robustness-crash: FENCEGATE_SEED=${SEED}`);
    const c = ctl!;
    const granted: number[] = [];
    let killsAtDevice = 0;
    let previous: { token: number; sent: Sent[] } | null = null;

    // LIVES lives end in a kill; one more start checks the last of them, and stays up.
    for (let life = 0; life <= LIVES; life++) {
      const d = await startDaemon();

      if (previous) {
        // 1. Every lease ended with the old process; the fence's token did not go back. Its
        // seq under that dead token may (the newest audit records lost): no command under it
        // can be accepted again, whatever its seq (3, below), so the seq no longer matters.
        const read = await c.read(A);
        expect(read).toMatchObject({ ok: true, state: { lease: null } });
        expect(read.state.fence.token).toBe(previous.token);

        // 2. The interrupted command: DUPLICATE if its audit record survived the kill, else a
        // lease error; never accepted again.
        const appliedBefore = sim!.device(1).applied.length;
        const last = previous.sent.at(-1)!;
        const reachedDevice = sim!.device(1).applied.some((e) => e.token === last.token && e.seq === last.seq);
        if (reachedDevice && last.reply === undefined) killsAtDevice++;
        const retry = await c.command(A, last.token, last.seq, { position: last.position });
        expect(retry.ok).toBe(false);
        expect(["DUPLICATE", "LEASE_EXPIRED"], JSON.stringify(retry)).toContain(retry.error.code);
        if (retry.error.code === "DUPLICATE") {
          const original = retry.error.original as Json;
          if (last.reply !== undefined) {
            expect(original).toMatchObject({ ok: true, outcome: "applied", token: last.token, seq: last.seq });
          } else if (original.ok) {
            expect(original).toMatchObject({ outcome: "applied", token: last.token, seq: last.seq });
          } else {
            expect(original.error.code).toBe("OUTCOME_UNKNOWN");
          }
        }
        // The last confirmed command of the old lease. The trail has no holes: if the interrupted
        // one is on record, so is this one's applied outcome. If not, the kill may have taken its
        // newest records: the whole command (a lease error), or only its outcome (its intent then
        // reads OUTCOME_UNKNOWN: the reply was sent before the outcome was durable, docs/mqtt-api.md "What a crash may lose").
        const confirmed = previous.sent.filter((s) => s.reply !== undefined && s.seq !== last.seq).at(-1);
        if (confirmed) {
          const again = await c.command(A, confirmed.token, confirmed.seq, { position: confirmed.position });
          const applied = { ok: false, error: { code: "DUPLICATE", original: { ok: true, outcome: "applied", seq: confirmed.seq } } };
          if (retry.error.code === "DUPLICATE") expect(again).toMatchObject(applied);
          else if (again.error?.code === "DUPLICATE" && !(again.error.original as Json).ok) {
            expect(again).toMatchObject({
              ok: false,
              error: { code: "DUPLICATE", original: { ok: false, error: { code: "OUTCOME_UNKNOWN" } } },
            });
          } else if (again.error?.code !== "LEASE_EXPIRED") expect(again).toMatchObject(applied);
        }
        // Neither retry touched the device again.
        expect(sim!.device(1).applied.length).toBe(appliedBefore);

        // 3. The old token with a new seq: its lease is gone.
        const stale = await c.command(A, previous.token, last.seq + 1000, { position: 50 });
        expect(["LEASE_EXPIRED", "STALE_TOKEN"]).toContain(stale.error?.code);
      }
      if (life === LIVES) break;

      // 4. A fresh grant is above every token ever granted.
      const lease = await c.acquire(A, 30_000);
      expect(lease.ok, JSON.stringify(lease)).toBe(true);
      const token = lease.lease.token as number;
      for (const t of granted) expect(token).toBeGreaterThan(t);
      granted.push(token);
      if (previous) {
        // (a seq never used under it: a used one would be DUPLICATE, which the contract checks first)
        const stale = await c.command(A, previous.token, previous.sent.length + 2000, { position: 50 });
        expect(stale.error?.code).toBe("STALE_TOKEN");
      }

      // 5. Stream, and kill at a random moment; every other life exactly while a command is at the device.
      const sent: Sent[] = [];
      let stopNow: () => void = () => {};
      const control = { stop: false, stopped: new Promise<void>((r) => (stopNow = r)) };
      sim!.setDelay(Math.floor(random() * 5));
      const streaming = stream(c, token, sent, control);
      if (life % 2 === 0) {
        await until(() => sent.filter((s) => s.reply).length >= 1 + Math.floor(random() * 10), { what: "some applied commands" });
        const before = sim!.device(1).applied.length;
        sim!.setDelay(600); // the device acts at once but holds its answer back
        await until(() => sim!.device(1).applied.length > before, { everyMs: 0, what: "a command at the device" });
      } else {
        await new Promise((r) => setTimeout(r, 50 + Math.floor(random() * 300)));
      }
      const statusFrom = watcher!.messages.length;
      control.stop = true;
      stopNow();
      await d.kill("SIGKILL");
      await streaming;
      sim!.setDelay(0);
      // The retained status says offline: the broker published the last will.
      await watcher!.waitFor((m) => m.topic === STATUS_TOPIC && m.payload === "offline", { from: statusFrom, what: "the last will" });

      previous = { token, sent };
    }

    // The device saw a strictly increasing (token, seq) across every life, and only commands
    // as they were sent (its seq is the gateway's write count under the token: here the API seq).
    const applied = sim!.device(1).applied;
    for (let i = 1; i < applied.length; i++) {
      const [p, q] = [applied[i - 1]!, applied[i]!];
      expect(
        q.token! > p.token! || (q.token === p.token && q.seq! > p.seq!),
        `applied[${i}] ${JSON.stringify(q)} after ${JSON.stringify(p)}`,
      ).toBe(true);
    }
    for (const e of applied) expect(e.setpoints.position).toBe(e.seq! % 101);
    expect(new Set(applied.map((e) => e.token)).size).toBe(LIVES);
    // At least half the lives were killed while a command was at the device, its answer pending.
    expect(killsAtDevice).toBeGreaterThanOrEqual(Math.ceil(LIVES / 2));
  });

  it("drains on SIGTERM: the command at the device completes, offline is published retained, exit code 0", async () => {
    const c = ctl!;
    const running = daemon && daemon.child.exitCode === null && daemon.child.signalCode === null;
    const d = running ? daemon! : await startDaemon();
    const lease = await c.acquire(A, 30_000);
    expect(lease.ok).toBe(true);
    const token = lease.lease.token as number;
    expect(await c.command(A, token, 0, { position: 10 })).toMatchObject({ ok: true, outcome: "applied" });

    const before = sim!.device(1).applied.length;
    sim!.setDelay(400);
    const pending = c.command(A, token, 1, { position: 77 });
    await until(() => sim!.device(1).applied.length > before, { everyMs: 0, what: "the command at the device" });
    const from = watcher!.messages.length;
    await d.kill("SIGTERM").then((exit) => expect(exit).toEqual({ code: 0, signal: null }));
    sim!.setDelay(0);

    // Drained: the command in flight was confirmed and answered before the daemon left.
    expect(await pending).toMatchObject({ ok: true, outcome: "applied", token, seq: 1, applied: { position: 77 } });
    await watcher!.waitFor((m) => m.topic === STATUS_TOPIC && m.payload === "offline", { from, what: "offline on clean shutdown" });
    await until(() => d.logs.some((l) => l.msg === "fencegate daemon stopped"), { what: "the daemon's last log line" });
    // Retained: a newcomer learns the gateway is offline.
    const late = await TopicWatcher.connect(broker!.url, [STATUS_TOPIC]);
    try {
      const seen = await late.waitFor((m) => m.topic === STATUS_TOPIC, { what: "the retained status" });
      expect(seen).toMatchObject({ payload: "offline", retain: true });
    } finally {
      await late.close();
    }
    // The outcome was recorded before exit: after a restart the retry is DUPLICATE with "applied".
    await startDaemon();
    const retry = await c.command(A, token, 1, { position: 77 });
    expect(retry).toMatchObject({ ok: false, error: { code: "DUPLICATE", original: { ok: true, outcome: "applied", seq: 1 } } });
  });
});
