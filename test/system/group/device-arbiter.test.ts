/**
 * The device as the final arbiter of a gateway group. The active gateway's etcd lease is
 * revoked behind its back while it cannot reach etcd: by its own clock it may still drive
 * devices for seconds, and the standby takes over meanwhile. The old gateway's next write
 * is refused by the device (0x46): it learns from that alone that it is stale, and steps
 * down at once. (Lease TTL 6 s, margin 1 s: renewals every 2 s leave the old gateway at
 * least 3 s of its own window after the last one.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REFUSAL } from "../../../packages/protocol/src/modbus-profile.ts";
import { TestController } from "../../support/controller.ts";
import { VALVE, isSteppingDown, startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport } from "../../support/stack.ts";
import { until } from "../../support/watch.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "arbiter", leaseTtlMs: 6000, selfFenceMarginMs: 1000, etcdLinks: true });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

describe("the device as the arbiter", () => {
  it("a gateway whose lease was revoked while it could not reach etcd writes once more: the device refuses it (0x46) and it steps down at once", async () => {
    const roles = () => group.roles();
    const a = await group.oneActive();
    const b = 1 - a;
    const old = group.daemons[a]!;
    const granted = await ctl.request(VALVE, "lease/acquire", { holder: "line-a", ttlMs: 30_000 });
    const t1 = granted.lease.token as number;
    expect(await ctl.request(VALVE, "command", { holder: "line-a", token: t1, seq: 1, set: { position: 10 } })).toMatchObject({ ok: true });

    // Right after a renewal: the old gateway's window is now 5 s long.
    const renewals = old.logs.filter((l) => l.msg === "etcd lease renewed").length;
    await old.waitForLog(
      (l) => l.msg === "etcd lease renewed" && old.logs.filter((x) => x.msg === "etcd lease renewed").length > renewals,
      5000,
      "a renewal",
    );
    group.etcdLinks[a]!.cut();
    const leader = await group.etcd.call("/v3/kv/range", { key: Buffer.from("/fencegate/arbiter/leader").toString("base64") });
    await group.etcd.call("/v3/lease/revoke", { ID: leader.kvs[0].lease });

    await group.waitActive(5000, [b]);
    const linesBefore = old.logs.length;
    const refusalsBefore = group.sim.device(1).refusalCount;
    const sentAt = performance.now();
    // Both gateways take this one: the new active refuses it (STALE_TOKEN), the old one still
    // believes its lease and writes. Either reply may come first.
    await ctl.request(VALVE, "command", { holder: "line-a", token: t1, seq: 2, set: { position: 20 } });
    const down = await old.waitForLog(
      (l) => isSteppingDown(l) && old.logs.indexOf(l) >= linesBefore,
      5000,
      "the old gateway stepping down",
    );
    const afterMs = performance.now() - sentAt;
    console.info(`the old gateway stepped down ${Math.round(afterMs)} ms after its stale write, reason ${String(down.reason)}`);
    const report = daemonReport(old, 20);
    expect(down.reason, report).toBe("stale");
    expect(afterMs, report).toBeLessThan(1000);
    expect(group.sim.device(1).refusalCount).toBeGreaterThan(refusalsBefore);
    expect(group.sim.device(1).lastRefusalReason).toBe(REFUSAL.STALE_TOKEN);
    expect(group.sim.device(1).applied.some((x) => x.setpoints.position === 20)).toBe(false);

    // With etcd back, the old gateway stands by behind the new one.
    group.etcdLinks[a]!.restore();
    await until(() => roles()[a] === "standby" && roles()[b] === "active", {
      timeoutMs: 15_000,
      what: `the old gateway standing by (${roles().join(", ")})`,
    });
  });
});
