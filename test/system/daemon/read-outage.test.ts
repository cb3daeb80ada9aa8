/**
 * `read` while the device does not answer: the real daemon, a real
 * Mosquitto, the simulated fenced valve muted. The read's poll fails; the reply must say
 * so (online false, and how old the points are) instead of passing the last points off as
 * a fresh, online state. No periodic poll runs, so only the read's own poll meets the mute
 * and the link has not yet declared the unit offline (that takes two timeouts).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { startStack, Teardown, type Stack } from "../../support/stack.ts";

const HOUR_MS = 3_600_000;
const teardown = new Teardown();
let stack: Stack;
let ctl: TestController;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "read-outage",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", host: sim.host, port: sim.port, timeoutMs: 300 } },
      actuators: [valve("valve-1", "sim", 1, "fenced", { pollIntervalMs: HOUR_MS })],
    }),
    fenced: ["valve-1"],
  });
  ctl = teardown.add(await TestController.connect(stack.broker.url, "reader"), (c) => c.close());
});

afterAll(() => teardown.run());

describe("read", () => {
  it("while the device answers: online, points just read", async () => {
    const reply = await ctl.read("valve-1");
    expect(reply).toMatchObject({ ok: true, state: { actuator: "valve-1", online: true, points: { position: 0 } } });
    expect(reply.state.pointsAgeMs).toBeGreaterThanOrEqual(0);
    expect(reply.state.pointsAgeMs).toBeLessThan(100);
  });

  it("during an outage says the device did not answer: online false, with the age of the points", async () => {
    stack.sim.mute(true);
    try {
      const mutedAtMs = performance.now();
      await new Promise((r) => setTimeout(r, 200));
      const reply = await ctl.read("valve-1");
      expect(reply).toMatchObject({ ok: true, state: { actuator: "valve-1", online: false, points: { position: 0 } } });
      // The points are from before the mute: at least as old as the mute, plus the read's own timeout.
      expect(reply.state.pointsAgeMs).toBeGreaterThanOrEqual(200 + 300);
      expect(reply.state.pointsAgeMs).toBeLessThan(performance.now() - mutedAtMs + 1000);
    } finally {
      stack.sim.mute(false);
    }
  });

  it("after the outage: online again, points fresh", async () => {
    const reply = await ctl.read("valve-1");
    expect(reply).toMatchObject({ ok: true, state: { online: true } });
    expect(reply.state.pointsAgeMs).toBeLessThan(100);
  });
});
