/**
 * A grant that etcd has not confirmed yet is nobody's: a request decided while it is on its
 * way must not treat it as granted. The active gateway's link to etcd stalls (its bytes
 * held), so a grant's commit waits for the request timeout and fails; a second acquire by
 * the same holder, arriving meanwhile, must not be answered as the live holder's retry of a
 * lease the group never confirmed. (Found by the group chaos run: a gateway woken from a
 * pause answered a controller's queued acquires, the first refused GROUP_UNAVAILABLE, the
 * retry granted the same token, which the new active gateway had taken for its takeover.)
 * Lease TTL 6 s, margin 1 s: the stalled gateway stays active through the scenario.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController, type Json } from "../../support/controller.ts";
import { VALVE, startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport } from "../../support/stack.ts";
import { until } from "../../support/watch.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "unconfirmed", leaseTtlMs: 6000, selfFenceMarginMs: 1000, etcdLinks: true });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

const acquire = (holder: string): Promise<Json> => ctl.request(VALVE, "lease/acquire", { holder, ttlMs: 30_000 }, { timeoutMs: 5000 });

describe("a grant the group has not confirmed", () => {
  it("an acquire by the same holder while the grant's etcd commit is on its way is not answered with that grant's token; both are refused GROUP_UNAVAILABLE", async () => {
    const a = await group.oneActive(30_000);
    const active = group.daemons[a]!;
    const first = await acquire("line-a");
    expect(first, daemonReport(active, 15)).toMatchObject({ ok: true });
    const t1 = first.lease.token as number;
    expect(await ctl.request(VALVE, "lease/release", { holder: "line-a", token: t1 })).toMatchObject({ ok: true });

    // Right after a renewal (the window is 5 s long from it), etcd stops answering this gateway.
    const renewals = () => active.logs.filter((l) => l.msg === "etcd lease renewed").length;
    const before = renewals();
    await until(() => renewals() > before, { timeoutMs: 5000, what: "a renewal" });
    group.etcdLinks[a]!.hold();
    // A controller's acquire, and its retry (or a second process with the same holder id) right behind it.
    const [grant, retry] = await Promise.all([acquire("line-b"), acquire("line-b")]);
    const report = `${JSON.stringify(grant)}\n${JSON.stringify(retry)}\n${daemonReport(active, 15)}`;
    expect(grant, report).toMatchObject({ ok: false, error: { code: "GROUP_UNAVAILABLE" } });
    expect(retry, report).toMatchObject({ ok: false, error: { code: "GROUP_UNAVAILABLE" } });

    // etcd back: the next grant is confirmed, above every token the group may have seen.
    group.etcdLinks[a]!.release();
    let later = await acquire("line-b");
    for (const deadline = performance.now() + 20_000; later.ok !== true && performance.now() < deadline; later = await acquire("line-b")) {
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(later, daemonReport(group.daemons[a]!, 15)).toMatchObject({ ok: true });
    expect(later.lease.token).toBeGreaterThan(t1 + 1);
  });
});
