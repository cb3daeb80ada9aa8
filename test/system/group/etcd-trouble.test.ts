/**
 * A gateway group on a 3-member etcd losing members: with one member killed the group
 * keeps working (grants included); with the quorum lost the active gateway grants nothing
 * new (GROUP_UNAVAILABLE), keeps serving commands under live leases while its own etcd lease
 * can still be valid, then stops device I/O; with the quorum back one gateway takes over,
 * with a token above every earlier one. Lease TTL 6 s, margin 1 s (what fits etcd's 1 s election timeout).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController, type Json } from "../../support/controller.ts";
import { VALVE, isSteppingDown, startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport } from "../../support/stack.ts";
import { until } from "../../support/watch.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;
let seq = 0;
const roles = () => group.roles();

beforeAll(async () => {
  group = await startGroup(teardown, { name: "quorum", etcd: { members: 3 }, leaseTtlMs: 6000, selfFenceMarginMs: 1000 });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

const request = (verb: string, body: Json) => ctl.request(VALVE, verb, body, { timeoutMs: 8000 });
const command = (holder: string, token: number, position: number) => request("command", { holder, token, seq: ++seq, set: { position } });

describe("etcd trouble", () => {
  it("one etcd member killed: the group keeps leading, granting and commanding; quorum lost: no new grants, live leases served until the lease window closes, then device I/O stops; quorum back: a takeover above every earlier token", async () => {
    const a = await group.oneActive(30_000);
    const active = group.daemons[a]!;
    const report = () => group.daemons.map((d) => daemonReport(d ?? undefined, 12)).join("\n\n");
    const t1 = (await request("lease/acquire", { holder: "line-a", ttlMs: 60_000 })).lease.token as number;
    expect(await command("line-a", t1, 10)).toMatchObject({ ok: true });

    // etcd's own leader is the member killed: the harder loss, with an election (a randomized
    // 1-2 s election timeout, more under load) during which etcd commits nothing, so a grant
    // in it is refused GROUP_UNAVAILABLE. The group is expected to ride it out, then grant again.
    const raftLeader = await group.etcd.waitForLeader(10_000);
    const second = [0, 1, 2].find((i) => i !== raftLeader)!;
    await group.etcd.kill(raftLeader);
    await group.etcd.waitForLeader(10_000); // a bound on the election, not a sleep: it returns as soon as one is agreed
    const renewedFrom = active.logs.length;
    await active.waitForLog(
      (l) => l.msg === "etcd lease renewed" && active.logs.indexOf(l) >= renewedFrom,
      10_000,
      "a renewal under the new etcd leader",
    );
    expect(roles()[a], report()).toBe("active");
    expect(await command("line-a", t1, 11)).toMatchObject({ ok: true });
    expect(await request("lease/release", { holder: "line-a", token: t1 })).toMatchObject({ ok: true });
    const granted = await request("lease/acquire", { holder: "line-b", ttlMs: 60_000 });
    expect(granted, report()).toMatchObject({ ok: true });
    const t2 = granted.lease.token as number;
    expect(t2).toBe(t1 + 1);

    const linesBefore = active.logs.length;
    await group.etcd.kill(second); // one of three left: no quorum
    const lostAt = performance.now();
    expect(await command("line-b", t2, 20), report()).toMatchObject({ ok: true, outcome: "applied" });
    expect(await request("lease/release", { holder: "line-b", token: t2 })).toMatchObject({ ok: true });
    const refused = await request("lease/acquire", { holder: "line-b", ttlMs: 60_000 });
    expect(refused, report()).toMatchObject({ ok: false, error: { code: "GROUP_UNAVAILABLE" } });
    console.info(`with the quorum lost: ${refused.error.message}`);

    const down = await active.waitForLog((l) => isSteppingDown(l) && active.logs.indexOf(l) >= linesBefore, 10_000, "stepping down");
    expect(down.reason).toBe("renewal-overdue");
    // Seen through the log (written in batches, on a loaded machine): within the lease's TTL,
    // an election timeout (etcd's old leader renews until it notices its quorum is gone) and
    // slack. The exact window, on the member's own clock: test/system/group/member.test.ts.
    expect(performance.now() - lostAt).toBeLessThan(6000 + 1000 + 1500);
    await until(() => roles().every((r) => r === "standby"), { timeoutMs: 5000, what: `both standing by (${roles().join(", ")})` });

    await group.etcd.restart(raftLeader); // quorum back
    await until(() => roles().includes("active"), { timeoutMs: 30_000, what: "a gateway active again" });
    const t3 = (await request("lease/acquire", { holder: "line-c", ttlMs: 60_000 })).lease.token as number;
    expect(t3).toBeGreaterThan(t2 + 1); // above t2, the refused grant's burned token and the takeover's own
    expect(await command("line-c", t3, 30)).toMatchObject({ ok: true, outcome: "applied" });
    const tokens = group.sim.device(1).applied.map((x) => x.token ?? 0);
    expect(tokens).toEqual([...tokens].sort((x, y) => x - y));
  });
});
