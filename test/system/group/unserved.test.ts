/**
 * An actuator a gateway group has served and no member serves any more: the active member
 * says so in its retained state (offline, no lease, why), whether it knows the actuator from
 * its own journal or only from the group's tokens in etcd (a member that never served it,
 * after a failover). Real etcd, Mosquitto, the simulated valves, the built daemons.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown, stopDaemon } from "../../support/stack.ts";
import { TopicWatcher, safeJson } from "../../support/watch.ts";

const RETIRED = "valve-2";
const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;
let watch: TopicWatcher;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "unserved", leaseTtlMs: 2000, sim: { units: [1, 2] } });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  watch = teardown.add(await TopicWatcher.connect(group.broker.url, [`fencegate/${RETIRED}/state`]), (w) => w.close());
});
afterAll(() => teardown.run());

/** The next state of valve-2 published by `gateway`, saying nothing serves it. */
async function unservedStateFrom(gateway: string, from: number): Promise<Record<string, unknown>> {
  const m = await watch.waitFor((m) => !m.retain && safeJson(m.payload)?.gateway === gateway && safeJson(m.payload)?.online === false, {
    from,
    timeoutMs: 20_000,
    what: `${RETIRED}'s state from ${gateway} saying nothing serves it`,
  });
  return safeJson(m.payload) as Record<string, unknown>;
}

describe("actuators no member of a group serves", () => {
  it("the active member says so from its journal, and after a failover a member that never served it says so from the group's tokens", async () => {
    const both = (config: Record<string, unknown>) => ({
      ...config,
      actuators: [...(config.actuators as unknown[]), valve(RETIRED, "plc", 2)],
    });
    const first = group.start(0, both);
    await group.waitActive(15_000, [0]);
    const grant = await ctl.acquire(RETIRED, 60_000);
    expect(grant.ok, JSON.stringify(grant)).toBe(true);
    const token = (grant.lease as { token: number }).token;
    await stopDaemon(first);

    // valve-2 leaves the configuration: gw-a, serving again, knows it from its journal.
    let from = watch.mark();
    group.start(0);
    await group.waitActive(15_000, [0]);
    expect(await unservedStateFrom("gw-a", from)).toMatchObject({
      actuator: RETIRED,
      lease: null,
      fence: { token, seq: null },
      problem: expect.stringContaining("its journal holds it, and it is not in the configuration of gateway gw-a"),
    });

    // gw-b never served valve-2; after gw-a dies it takes over and knows valve-2 from etcd.
    group.start(1);
    await group.oneActive();
    from = watch.mark();
    await group.daemons[0]!.kill("SIGKILL");
    await group.waitActive(20_000, [1]);
    const state = await unservedStateFrom("gw-b", from);
    expect(state).toMatchObject({ actuator: RETIRED, online: false, lease: null, fence: { token, seq: null }, safeWrite: null });
    expect(state.problem).toBe(
      "no gateway serves this actuator: gateway group unserved has granted tokens on it, and it is not in the configuration of its active gateway gw-b; requests to it get no reply. Add it to a gateway's configuration to serve it again.",
    );
  });
});
