/**
 * A gateway group whose valve has expiry policy "safe": a takeover is uncertainty like a
 * restart, so the new active gateway owes the device its safe values, and writes them under
 * its own newest token before any controller is granted one. The fence raise then sits above
 * that write; nothing of it looks stale to the new gateway.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { VALVE, isSteppingDown, startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown } from "../../support/stack.ts";
import { until } from "../../support/watch.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;

beforeAll(async () => {
  group = await startGroup(teardown, {
    name: "safe",
    leaseTtlMs: 2000,
    gateway: { actuators: [valve(VALVE, "plc", 1, "fenced", { expiry: { policy: "safe", set: { position: 0 } } })] },
  });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

describe("expiry policy safe in a gateway group", () => {
  it("the new active gateway drives the valve to its safe value at takeover, then grants above it", async () => {
    const a = await group.oneActive();
    const t1 = (await ctl.request(VALVE, "lease/acquire", { holder: "line-a", ttlMs: 30_000 })).lease.token as number;
    expect(await ctl.request(VALVE, "command", { holder: "line-a", token: t1, seq: 1, set: { position: 60 } })).toMatchObject({ ok: true });
    await group.daemons[a]!.kill("SIGKILL");
    const b = await group.waitActive(10_000, [1 - a]);
    await until(() => group.sim.device(1).applied.at(-1)?.setpoints.position === 0, { timeoutMs: 5000, what: "the safe value applied" });
    const safe = group.sim.device(1).applied.at(-1)!;
    expect(safe.token).toBeGreaterThan(t1);
    const t2 = (await ctl.request(VALVE, "lease/acquire", { holder: "line-a", ttlMs: 30_000 })).lease.token as number;
    expect(t2).toBeGreaterThan(safe.token!);
    expect(await ctl.request(VALVE, "command", { holder: "line-a", token: t2, seq: 1, set: { position: 30 } })).toMatchObject({
      ok: true,
      outcome: "applied",
    });
    expect(group.daemons[b]!.logs.some(isSteppingDown)).toBe(false);
    expect(group.roles()[b]).toBe("active");
  });
});
