/**
 * A controller that restarts within its lease's TTL gets its own live lease back (same
 * token: acquire by the live holder is a refresh). Its new Lease must not number commands
 * from 0 again: a (token, seq) already used is answered DUPLICATE with the OLD command's
 * outcome, and the library would report the new command applied while the device never
 * saw it (found by the chaos checker's rule "one (token, seq) names one command"). The
 * acquire reply for a live lease carries the fence, and the Lease numbers above it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FencegateClient } from "../src/index.ts";
import { valve } from "../../../test/support/daemon.ts";
import { Teardown, startStack, type Stack } from "../../../test/support/stack.ts";

const teardown = new Teardown();
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "seq-reuse",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", host: sim.host, port: sim.port, timeoutMs: 2000 } },
      actuators: [valve("valve-1", "sim", 1)],
    }),
    fenced: ["valve-1"],
  });
});

afterAll(() => teardown.run());

describe("a controller restarted within its TTL", () => {
  it("continues above the seqs its earlier process used: its command is applied, not answered with an old outcome", async () => {
    const before = await FencegateClient.connect({ url: stack.broker.url, holder: "restarting" });
    const first = await before.acquire("valve-1", { ttlMs: 30_000 });
    await first.command({ position: 10 });
    await first.command({ position: 20 });
    await before.mqtt.endAsync(true); // the process dies; its lease lives on at the gateway

    const after = teardown.add(await FencegateClient.connect({ url: stack.broker.url, holder: "restarting" }), (c) => c.close());
    const again = await after.acquire("valve-1", { ttlMs: 30_000 });
    expect(again.token).toBe(first.token); // the live holder's refresh
    const done = await again.command({ position: 55 });
    expect(done.applied).toEqual({ position: 55 });
    expect(done.seq).toBeGreaterThan(1);
    expect(stack.sim.device(1).targetPosition).toBe(55);
    await again.release();
  });

  it("also when its first command's reply comes after the timeout (the retry must not be answered with the old outcome)", async () => {
    const before = await FencegateClient.connect({ url: stack.broker.url, holder: "restarting-slow" });
    const first = await before.acquire("valve-1", { ttlMs: 30_000 });
    await first.command({ position: 30 });
    await first.command({ position: 40 });
    await before.mqtt.endAsync(true);

    const after = teardown.add(await FencegateClient.connect({ url: stack.broker.url, holder: "restarting-slow" }), (c) => c.close());
    const again = await after.acquire("valve-1", { ttlMs: 30_000 });
    expect(again.token).toBe(first.token);
    // Every attempt times out at once; each late reply answers the next attempt (same id).
    const done = await again.command({ position: 66 }, { timeoutMs: 1, retries: 50 });
    expect(done.applied).toEqual({ position: 66 });
    expect(stack.sim.device(1).targetPosition).toBe(66);
    await again.release();
  });
});
