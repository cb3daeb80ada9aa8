/**
 * A read flood on one slow actuator: the real daemon, a real
 * Mosquitto, two simulated fenced valves on two buses, valve-a's device answering each
 * transaction in 400 ms. Reads of valve-a have a budget of their own: beyond it they are
 * refused OVERLOADED, but lease requests and commands (of valve-a, or of any other actuator)
 * never are, and concurrent reads share one poll of the device. Beyond the requester's rate
 * budget (admission.ts) one more is refused OVERLOADED and the rest go unanswered for a second.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { MAX_PENDING_READS_PER_ACTUATOR } from "../../../src/adapters/mqtt/link.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { startStack, Teardown, type Stack } from "../../support/stack.ts";

const HOUR_MS = 3_600_000;
const DEVICE_DELAY_MS = 400;
const teardown = new Teardown();
let stack: Stack;
let simB: SimulatorHandle;
let flooder: TestController;
let owner: TestController;

beforeAll(async () => {
  simB = teardown.add(await startSimulator({ units: [1], rate: 0, tcp: { host: "127.0.0.1", port: 0 } }), (s) => s.close());
  stack = await startStack(teardown, {
    name: "read-flood",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({
      buses: {
        a: { type: "tcp", host: sim.host, port: sim.port, timeoutMs: 2000 },
        b: { type: "tcp", host: simB.tcp!.host, port: simB.tcp!.port, timeoutMs: 2000 },
      },
      // No periodic polls: every device read of valve-a comes from a read request.
      actuators: [
        valve("valve-a", "a", 1, "fenced", { pollIntervalMs: HOUR_MS }),
        valve("valve-b", "b", 1, "fenced", { pollIntervalMs: HOUR_MS }),
      ],
    }),
    fenced: ["valve-a", "valve-b"],
  });
  stack.sim.setDelay(DEVICE_DELAY_MS);
  flooder = teardown.add(await TestController.connect(stack.broker.url, "flooder"), (c) => c.close());
  owner = teardown.add(await TestController.connect(stack.broker.url, "owner"), (c) => c.close());
});

afterAll(() => teardown.run());

/** A request over its sender's rate budget, dropped unanswered. */
const UNANSWERED = { ok: false, error: { code: "unanswered" } } as const;

/** Sends `n` reads of valve-a at once (not awaiting any) and resolves with their replies (UNANSWERED: none in 5 s). */
function readBurst(n: number): Promise<Json>[] {
  return Array.from({ length: n }, () => flooder.request("valve-a", "read", {}, { timeoutMs: 5000 }).catch(() => UNANSWERED));
}

function codes(replies: Json[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of replies) {
    const key = r.ok ? "ok" : r.error.code;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

describe("a read flood on a slow actuator", () => {
  it("800 reads of valve-a leave an acquire of valve-b (another bus) answered ok, right behind them", async () => {
    const reads = readBurst(800);
    // Same connection, so the broker delivers it after all 800 reads.
    const acquire = flooder.request("valve-b", "lease/acquire", { holder: "flooder", ttlMs: 5000 });
    const granted = await acquire;
    expect(granted).toMatchObject({ ok: true, lease: { holder: "flooder" } });
    const replies = await Promise.all(reads);
    const byCode = codes(replies);
    expect(Object.keys(byCode).sort()).toEqual(["OVERLOADED", "ok", "unanswered"]);
    expect(byCode.ok).toBeGreaterThanOrEqual(MAX_PENDING_READS_PER_ACTUATOR);
    expect(replies.find((r) => !r.ok)!.error.message).toContain(`valve-a has ${MAX_PENDING_READS_PER_ACTUATOR} reads in progress`);
    await flooder.request("valve-b", "lease/release", { holder: "flooder", token: granted.lease.token });
  });

  it("concurrent reads share one poll of the device", async () => {
    const before = stack.sim.counters.requests;
    const replies = await Promise.all(readBurst(MAX_PENDING_READS_PER_ACTUATOR));
    expect(codes(replies)).toEqual({ ok: MAX_PENDING_READS_PER_ACTUATOR });
    // One poll of a fenced valve is its keep-alive write and one register read; a second poll
    // may start if the burst straddled the end of the first.
    expect(stack.sim.counters.requests - before).toBeLessThanOrEqual(4);
  });

  it("a sustained flood starves neither renewals nor a command on the flooded actuator itself", async () => {
    const lease = await owner.acquire("valve-a", 2000);
    expect(lease).toMatchObject({ ok: true });
    const token = lease.lease.token as number;
    const flood: Promise<Json>[] = [];
    const renewals: Json[] = [];
    const startedMs = performance.now();
    let command: Promise<Json> | null = null;
    while (performance.now() - startedMs < 3000) {
      flood.push(...readBurst(100));
      if (renewals.length < Math.floor((performance.now() - startedMs) / 500)) {
        renewals.push(await owner.request("valve-a", "lease/renew", { holder: "owner", token }));
      }
      command ??= owner.command("valve-a", token, 1, { position: 42 });
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(renewals.length).toBeGreaterThanOrEqual(5);
    expect(renewals.filter((r) => !r.ok)).toEqual([]);
    expect(await command).toMatchObject({ ok: true, outcome: "applied", applied: { position: 42 } });
    // Released before the unanswered reads time out, which outlasts the lease.
    expect((await owner.request("valve-a", "lease/release", { holder: "owner", token })).ok).toBe(true);
    const byCode = codes(await Promise.all(flood));
    expect(byCode.ok).toBeGreaterThan(0);
  });
});
