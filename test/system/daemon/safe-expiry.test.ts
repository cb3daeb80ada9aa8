/**
 * The `safe` expiry policy silently skipped. Real
 * Mosquitto, the real daemon, the simulated fenced valve over Modbus TCP, a real SIGKILL.
 *
 * (a) the device is unreachable when the lease expires: the safe write is owed (the retained
 *     state says so) and retried until the device confirms it;
 * (b) the daemon is killed under a live lease: at restart the lease is reported ended
 *     (`expired`, reason "restart") and the valve is driven to its safe value.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import type { TestController } from "../../support/controller.ts";
import { DaemonProcess } from "../../support/daemon.ts";
import { Teardown, startValveStack, type ValveStack } from "../../support/stack.ts";
import { TopicWatcher, safeJson, until } from "../../support/watch.ts";

const A = "valve-1";
const STATE = `fencegate/${A}/state`;
const EVENTS = `fencegate/${A}/events`;
const SAFE_POSITION = 0;

const teardown = new Teardown();
let world: ValveStack;
let sim: SimulatorHandle;
let ctl: TestController;
let watcher: TopicWatcher;

beforeAll(async () => {
  world = await startValveStack(teardown, {
    name: "safe",
    id: A,
    bus: { timeoutMs: 300, reconnect: { minMs: 100, maxMs: 400 } },
    actuator: { expiry: { policy: "safe", set: { position: 0 } } },
    setup: { commands: { safeWriteRetry: { minMs: 100, maxMs: 400 } } },
  });
  ({ sim, ctl } = world);
  watcher = teardown.add(await TopicWatcher.connect(world.broker.url, [STATE, EVENTS]), (w) => w.close());
});
afterAll(() => teardown.run());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function leaseAndMove(ttlMs: number, position: number): Promise<number> {
  const grant = await ctl.acquire(A, ttlMs);
  expect(grant.ok, JSON.stringify(grant)).toBe(true);
  const token = grant.lease.token as number;
  expect(await ctl.command(A, token, 0, { position })).toMatchObject({ ok: true, outcome: "applied" });
  expect(sim.device(1).targetPosition).toBe(position);
  return token;
}

describe("the safe expiry policy is carried out, whatever ends the lease", () => {
  it("(a) device unreachable at expiry: the safe write is owed in the state and retried until the device confirms it", async () => {
    const token = await leaseAndMove(1000, 50);
    const from = watcher.mark();
    sim.mute(true);
    let owed: Record<string, any>;
    try {
      // The lease runs out while the device is silent: the state shows the safe write owed.
      owed = await watcher.waitForJson(STATE, (s) => s.lease === null && s.safeWrite !== null, {
        from,
        what: "a state with the safe write owed",
      });
      expect(owed.safeWrite).toMatchObject({ set: { position: 0 } });
      expect(owed.safeWrite.token).toBeGreaterThan(token);
      await sleep(3000); // several expiries' worth: the valve stays where it was, nothing is given up
      expect(sim.device(1).targetPosition).toBe(50);
    } finally {
      sim.mute(false);
    }
    await until(() => sim.device(1).targetPosition === SAFE_POSITION, { timeoutMs: 10_000, what: "the valve at its safe value" });
    const done = await watcher.waitForJson(STATE, (s) => s.safeWrite === null && s.fence.token >= owed.safeWrite.token, {
      from,
      what: "the state once confirmed",
    });
    expect(done.lease).toBeNull();
    await watcher.waitForJson(EVENTS, (e) => e.type === "applied" && e.holder === "@gateway", {
      from,
      what: "the gateway's applied event",
    });
    expect(sim.device(1).fence.token).toBeGreaterThanOrEqual(owed.safeWrite.token);
  });

  it("(b) gateway restart under a live lease: the lease is reported ended and the valve goes to its safe value", async () => {
    const token = await leaseAndMove(60_000, 60);
    await world.daemon.kill("SIGKILL");
    const from = watcher.mark();
    world.daemon = DaemonProcess.start(world.dir, world.config);
    await world.daemon.ready([A]);
    const expired = await watcher.waitForJson(EVENTS, (e) => e.type === "expired", { from, what: "expired at restart" });
    expect(expired).toMatchObject({ holder: "line-a", token, reason: "restart" });
    await until(() => sim.device(1).targetPosition === SAFE_POSITION, { timeoutMs: 10_000, what: "the valve at its safe value" });
    const state = await watcher.waitForJson(STATE, (s) => s.safeWrite === null && s.fence.token > token, {
      from,
      what: "the state once confirmed",
    });
    expect(state.lease).toBeNull();
    // The old lease is over for good; the next one is above the gateway's own token.
    expect((await ctl.command(A, token, 1, { position: 70 })).error?.code).toBe("STALE_TOKEN");
    const next = await ctl.acquire(A, 5000);
    expect(next.lease.token).toBeGreaterThan(state.fence.token);
    // Nothing else was written: the gateway's write is the last the device applied before the new lease.
    const gatewayWrite = sim.device(1).applied.at(-1)!;
    expect(gatewayWrite).toMatchObject({ token: state.fence.token });
    expect(safeJson(watcher.last(STATE)!.payload)?.safeWrite).toBeNull();
  });
});
