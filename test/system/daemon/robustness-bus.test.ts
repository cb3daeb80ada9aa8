/**
 * One Modbus RTU line shared by two units, end to end: the real daemon process, real
 * Mosquitto, and the simulated fenced actuator answering units 1 and 2 on a real pty pair.
 *
 * - Fairness: two controllers hammering two actuators on the same line both make progress.
 * - A late reply after a timeout is never taken for the answer to a later request. RTU has
 *   no transaction id: a slave's answer carries only its unit, function code and data, so
 *   a late FC03 answer of unit 2 is byte-for-byte a valid answer to the next FC03 of unit 2
 *   (libmodbus#83). The scenario below is built so that a master which sends the next
 *   request as soon as it gives up (modbus-serial on its own) WOULD report a stale position.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { TopicWatcher, tcpNoDelay, until } from "../../support/watch.ts";

/**
 * The bus timeout; the daemon waits for max(20, T/2) ms of silence after a timeout. Every
 * time below is relative to it, and it is generous: on a loaded 2-core machine the
 * simulator (in this process) can be late by tens of milliseconds.
 */
const TIMEOUT_MS = 1000;
const QUIET_MS = TIMEOUT_MS / 2;
const HOUR_MS = 3_600_000;

let dir: string;
let broker: Broker | undefined;
let pty: PtyPair | undefined;
let sim: SimulatorHandle | undefined;
let daemon: DaemonProcess | undefined;
let c1: TestController | undefined;
let c2: TestController | undefined;
let watcher: TopicWatcher | undefined;
let metricsPort = 0;

/** How many transactions on the line ended with `result`, from the daemon's /metrics. */
async function transactions(result: "ok" | "timeout" | "exception" | "error"): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`fencegate_modbus_transaction_seconds_count{bus="line",result="${result}"}`));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

/**
 * Calls `onRequest` synchronously each time the simulator takes a request off the line,
 * before it builds the answer (the station counts the request first): a fault set there
 * applies to exactly this request.
 */
let onRequest: ((n: number) => void) | null = null;
function hookRequests(s: SimulatorHandle): void {
  let requests = s.counters.requests;
  Object.defineProperty(s.counters, "requests", {
    configurable: true,
    enumerable: true,
    get: () => requests,
    set: (v: number) => {
      requests = v;
      onRequest?.(v);
    },
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-bus-"));
  broker = await startMosquitto();
  pty = await createPtyPair();
  sim = await startSimulator({ serial: { path: pty.device }, units: [1, 2], rate: 0 });
  hookRequests(sim);
  ({ daemon, metricsPort } = await DaemonProcess.startOnFreeMetricsPort(dir, (metricsPort) =>
    gatewayConfig({
      brokerUrl: broker!.url,
      journalPath: join(dir, "journal.db"),
      buses: { line: { type: "rtu", path: pty!.master, timeoutMs: TIMEOUT_MS } },
      metricsPort,
      // No background polling: every transaction on the line is one a test caused.
      actuators: [
        valve("valve-1", "line", 1, "fenced", { pollIntervalMs: HOUR_MS }),
        valve("valve-2", "line", 2, "fenced", { pollIntervalMs: HOUR_MS }),
      ],
    }),
  ));
  await daemon.ready(["valve-1", "valve-2"]);
  [c1, c2] = await Promise.all([TestController.connect(broker.url, "c1"), TestController.connect(broker.url, "c2")]);
  for (const c of [c1, c2]) tcpNoDelay(c.client); // else the one-at-a-time controller measures Nagle, not the bus
  watcher = await TopicWatcher.connect(broker.url, ["fencegate/valve-2/state"]);
});

afterAll(async () => {
  onRequest = null;
  await daemon?.kill("SIGKILL");
  await Promise.allSettled([c1?.close(), c2?.close(), watcher?.close()]);
  await sim?.close();
  await pty?.close();
  await broker?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Resolves once the line has carried no request for `ms`. */
async function quiesce(ms = 150): Promise<void> {
  let last = sim!.counters.requests;
  let since = performance.now();
  await until(
    () => {
      const now = sim!.counters.requests;
      if (now !== last) [last, since] = [now, performance.now()];
      return performance.now() - since >= ms;
    },
    { what: "a quiet line" },
  );
}

/** A lease, and the first seq above every command already accepted under its token (a live holder's acquire reply carries the fence). */
async function lease(c: TestController, actuator: string): Promise<{ token: number; seq: number }> {
  const r = await c.acquire(actuator, 60_000);
  expect(r.ok, JSON.stringify(r)).toBe(true);
  const token = r.lease.token as number;
  const fenceSeq = r.fence?.token === token ? (r.fence.seq as number | null) : null;
  return { token, seq: fenceSeq === null ? 0 : fenceSeq + 1 };
}

describe("two units on one RTU line", () => {
  it("serves two controllers hammering two actuators fairly: both progress, neither gets < 1/3 of the other", async () => {
    const DURATION_MS = 3000;
    // c1 keeps 8 commands outstanding, c2 one at a time: the greedy one must not crowd out the other.
    const run = async (c: TestController, actuator: string, window: number) => {
      const { token } = await lease(c, actuator);
      const replies: Json[] = [];
      let seq = 0;
      const until = performance.now() + DURATION_MS;
      const lane = async () => {
        while (performance.now() < until) {
          const s = seq++;
          replies.push(await c.command(actuator, token, s, { position: s % 101 }, { deadlineMs: 5000 }));
        }
      };
      await Promise.all(Array.from({ length: window }, lane));
      return { token, replies };
    };
    const [r1, r2] = await Promise.all([run(c1!, "valve-1", 8), run(c2!, "valve-2", 1)]);

    for (const [unit, r] of [
      [1, r1],
      [2, r2],
    ] as const) {
      // Nothing is refused; a transaction the loaded machine let time out is OUTCOME_UNKNOWN.
      const refused = r.replies.filter((x) => !x.ok).map((x) => x.error.code);
      expect(
        refused.every((code) => code === "OUTCOME_UNKNOWN"),
        JSON.stringify(refused.slice(0, 5)),
      ).toBe(true);
      // Each applied reply is a command the device acted on, with the value it holds (the
      // device's seq counts the gateway's writes under the token: here the API seq).
      const ok = r.replies.filter((x) => x.ok);
      const applied = sim!.device(unit).applied.filter((e) => e.token === r.token);
      expect(applied.length).toBeGreaterThanOrEqual(ok.length);
      expect(applied.length).toBeLessThanOrEqual(r.replies.length);
      const bySeq = new Map(applied.map((e) => [e.seq, e.setpoints.position]));
      for (const x of ok) expect(bySeq.get(x.seq)).toBe(x.applied.position);
    }
    const n1 = sim!.device(1).applied.filter((e) => e.token === r1.token).length;
    const n2 = sim!.device(2).applied.filter((e) => e.token === r2.token).length;
    console.info(`robustness-bus: applied on unit 1: ${n1}, on unit 2: ${n2}`);
    expect(Math.min(n1, n2), `unit 1 applied ${n1}, unit 2 applied ${n2}`).toBeGreaterThan(10);
    expect(Math.min(n1, n2) * 3, `unit 1 applied ${n1}, unit 2 applied ${n2}`).toBeGreaterThanOrEqual(Math.max(n1, n2));
  });

  it("never takes a late reply after a timeout for the answer to the next request of the same unit", async () => {
    // c2 still holds valve-2 from the test before, with its commands numbered from 0 upwards.
    const { token, seq } = await lease(c2!, "valve-2");
    expect(await c2!.command("valve-2", token, seq, { position: 20 })).toMatchObject({ ok: true, applied: { position: 20 } });
    await quiesce();
    expect(sim!.device(2).targetPosition).toBe(20);
    const timeoutsBefore = await transactions("timeout");

    // On the line: 1 FC06 keep-alive and 2 FC03 of position/actual/status (the read's poll),
    // 3 FC16 to 60 (the command, queued behind the read), 4 FC06 and 5 FC03 (the read-back
    // once writes paused, READ_BACK_SETTLE_MS = 100 ms after the command). Request 2 is answered LATE_MS after it arrived: past the timeout (T),
    // inside the quiet window (T..T+Q). Requests 3, 4 and 5 are answered in 20, 0 and 600 ms.
    //
    // A master that sends the next request the moment it times out would have request 5
    // outstanding from ~T+125 to ~T+725, plus the machine's lag (measured: up to ~170 ms on
    // a loaded 2-core machine), and the late answer to request 2 (position 20) lands at T+400:
    // it is taken for the answer to request 5, and the state says 20 while the device holds 60.
    const LATE_MS = TIMEOUT_MS + 400;
    const ANSWER_MS: Record<number, number> = { 3: 20, 4: 0, 5: 600, 6: 0 };
    expect(ANSWER_MS[5]).toBeLessThan(TIMEOUT_MS);
    expect(LATE_MS - TIMEOUT_MS).toBeLessThan(QUIET_MS);
    let first = -1;
    const sent: { command?: Promise<Json> } = {};
    onRequest = (n) => {
      if (first < 0) first = n;
      const k = n - first + 1;
      if (k === 2) {
        sim!.setDelay(LATE_MS, 2);
        sent.command = c2!.command("valve-2", token, seq + 1, { position: 60 });
      } else if (ANSWER_MS[k] !== undefined) {
        sim!.setDelay(ANSWER_MS[k]!, 2);
      }
    };
    const from = watcher!.messages.length;
    let read: Json;
    try {
      read = await c2!.read("valve-2");
      const applied = await until(() => sent.command, { what: "the command to be sent" });
      expect(applied).toMatchObject({ ok: true, outcome: "applied", applied: { position: 60 } });
      // The read-back after the command (requests 4 and 5) publishes what it read: the first
      // state after the command's own (position 60, actual still 20) that differs from it.
      const isConfirmation = (s: Record<string, any>) => s.points.position === 60 && s.points.actual === 20;
      const confirmation = await watcher!.waitForJson("fencegate/valve-2/state", isConfirmation, { from, what: "the command's state" });
      await watcher!.waitForJson("fencegate/valve-2/state", (s) => JSON.stringify(s.points) !== JSON.stringify(confirmation.points), {
        from:
          watcher!.messages.findIndex(
            (m, i) => i >= from && m.topic === "fencegate/valve-2/state" && isConfirmation(JSON.parse(m.payload)),
          ) + 1,
        what: "the state the read-back after the command read",
      });
      await quiesce();
    } finally {
      onRequest = null;
    }
    // The timed-out read answered with what the gateway knew before: the device at 20.
    expect(read).toMatchObject({ ok: true, state: { points: { position: 20 } } });
    sim!.setDelay(0, 2);
    expect(sim!.device(2).targetPosition).toBe(60);
    // Exactly one transaction timed out: the delayed FC03; its answer came after that.
    expect((await transactions("timeout")) - timeoutsBefore).toBe(1);

    // From the command's confirmation on (the first state at 60), every state published
    // matches the device: the read-back after it must not bring back 20.
    const states = watcher!.messages.slice(from).map((m) => JSON.parse(m.payload) as Json);
    const confirmed = states.findIndex((s) => s.points.position === 60);
    expect(confirmed, JSON.stringify(states)).toBeGreaterThanOrEqual(0);
    const afterCommand = states.slice(confirmed);
    for (const s of afterCommand) expect(s.points, JSON.stringify(s)).toMatchObject({ position: 60 });
    expect(afterCommand.at(-1)!.points).toEqual({ position: 60, actual: 60, status: sim!.device(2).status });
    // A fresh read agrees, and unit 2 stayed online (one timeout is not two).
    expect(await c2!.read("valve-2")).toMatchObject({ ok: true, state: { online: true, points: { position: 60, actual: 60 } } });
  });
  it("never takes another unit's reply, arriving after the quiet window, for the answer of the unit asked", async () => {
    const [l1, l2] = [await lease(c1!, "valve-1"), await lease(c2!, "valve-2")];
    expect(await c1!.command("valve-1", l1.token, l1.seq, { position: 25 })).toMatchObject({ ok: true, applied: { position: 25 } });
    expect(await c2!.command("valve-2", l2.token, l2.seq, { position: 75 })).toMatchObject({ ok: true, applied: { position: 75 } });
    await quiesce();
    const before = { ok: await transactions("ok"), timeout: await transactions("timeout"), error: await transactions("error") };

    // Reads of valve-2 then valve-1: on the line FC06(2), FC06(1), FC03(2), FC03(1), taken
    // in turn. Unit 1 answers in UNIT1_MS; unit 2's FC03 (the first unit-2 request after its
    // keep-alive) in LATE_MS: sent once FC06(1) is answered (t = UNIT1_MS), it times out at
    // t+T, the line is quiet until t+T+Q, FC03(1) goes out then and is answered UNIT1_MS later, and unit 2's late
    // answer (position 75, same function code and length) lands 250 ms into that. Only the unit id tells
    // it apart; a master taking it would report 75 for valve-1 or fail the read.
    const UNIT1_MS = 600;
    const LATE_MS = TIMEOUT_MS + QUIET_MS + 250;
    const keepAlives2 = sim!.device(2).keepAlives;
    sim!.setDelay(UNIT1_MS, 1);
    onRequest = () => {
      if (sim!.device(2).keepAlives > keepAlives2) {
        sim!.setDelay(LATE_MS, 2);
        onRequest = null;
      }
    };
    let r1: Json;
    try {
      const r2 = c2!.read("valve-2");
      r1 = await c1!.read("valve-1");
      await r2;
    } finally {
      onRequest = null;
    }
    await quiesce(LATE_MS);
    sim!.setDelay(0);
    expect(r1).toMatchObject({ ok: true, state: { online: true, points: { position: 25, actual: 25 } } });
    // Unit 2's FC03 timed out; every other transaction (both keep-alives, unit 1's FC03) got its own answer.
    expect((await transactions("timeout")) - before.timeout).toBe(1);
    expect((await transactions("error")) - before.error).toBe(0);
    expect((await transactions("ok")) - before.ok).toBe(3);
    expect(await c1!.read("valve-1")).toMatchObject({ ok: true, state: { points: { position: 25 } } });
    expect(await c2!.read("valve-2")).toMatchObject({ ok: true, state: { online: true, points: { position: 75 } } });
  });
});
