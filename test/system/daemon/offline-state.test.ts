/**
 * After a clean stop the retained state still said
 * `online: true` with a live lease, and `fencegate status` and `watch` showed a dead gateway
 * as online. Real daemon, real Mosquitto, the simulated valve; the CLI and the client library
 * as a controller would run them.
 */
import { FencegateClient, type ActuatorState } from "fencegate-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DaemonProcess } from "../../support/daemon.ts";
import { runFencegate } from "../../support/processes.ts";
import { Teardown, startValveStack, type ValveStack } from "../../support/stack.ts";
import { TopicWatcher, retainedOn, safeJson } from "../../support/watch.ts";

const A = "valve-1";
const STATE = `fencegate/${A}/state`;
const STATUS = "fencegate/gateway/test/status";
const teardown = new Teardown();
let world: ValveStack;

beforeAll(async () => {
  world = await startValveStack(teardown, { name: "offline", id: A });
});
afterAll(() => teardown.run());

const retained = (topics: string[]) => retainedOn(world.broker.url, topics);

async function leased(): Promise<void> {
  const grant = await world.ctl.acquire(A, 60_000);
  expect(grant.ok, JSON.stringify(grant)).toBe(true);
  const before = await retained([STATE]);
  expect(safeJson(before.get(STATE)!)).toMatchObject({ online: true, lease: { holder: "line-a" }, gateway: "test" });
}

describe("a stopped or crashed gateway's actuators read as offline, with no lease", () => {
  it("a clean stop leaves every retained state offline with no lease, naming the gateway", async () => {
    await leased();
    expect(await world.daemon.kill("SIGTERM")).toEqual({ code: 0, signal: null });
    const after = await retained([STATE, STATUS]);
    expect(after.get(STATUS)).toBe("offline");
    expect(safeJson(after.get(STATE)!)).toMatchObject({ actuator: A, online: false, lease: null, gateway: "test" });
  });

  it("a crashed gateway (its last will) reads offline with no lease in `fencegate status` and in the library's watch", async () => {
    world.daemon = DaemonProcess.start(world.dir, world.config);
    await world.daemon.ready([A]);
    await leased();
    await world.daemon.kill("SIGKILL");
    // The broker publishes the last will once it notices the connection is gone: a moment
    // after the process died, not necessarily before a newcomer's subscription.
    const will = await TopicWatcher.connect(world.broker.url, [STATUS]);
    try {
      await will.waitFor((m) => m.topic === STATUS && m.payload === "offline", { what: "the last will on the gateway status" });
    } finally {
      await will.close();
    }
    const after = await retained([STATE, STATUS]);
    expect(after.get(STATUS)).toBe("offline");
    expect(safeJson(after.get(STATE)!)).toMatchObject({ online: true, lease: { holder: "line-a" } }); // nobody could change it

    const status = await runFencegate(["status", "--broker", world.broker.url, "--json"], { timeoutMs: 30_000 });
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toEqual({
      ok: true,
      actuators: [expect.objectContaining({ actuator: A, online: false, lease: null, gateway: "test" })],
    });
    const human = await runFencegate(["status", "--broker", world.broker.url], { timeoutMs: 30_000 });
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toMatch(new RegExp(`^${A} +NO +- +- `, "m"));

    const client = await FencegateClient.connect({ url: world.broker.url, holder: "watcher" });
    try {
      const abort = new AbortController();
      let first: ActuatorState | undefined;
      for await (const item of client.watch(A, { signal: abort.signal })) {
        if (item.kind === "state") {
          first = item.state;
          break;
        }
      }
      expect(first).toMatchObject({ online: false, lease: null, gateway: "test" });
    } finally {
      await client.close();
    }
  });
});
