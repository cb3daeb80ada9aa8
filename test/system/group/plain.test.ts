/**
 * A gateway group with a plain device (accepted explicitly): no device fence to read or
 * raise, so the group's token counter in etcd is what keeps tokens rising across a
 * failover. The new active gateway's journal never saw the old one's grants.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../../support/controller.ts";
import { VALVE, startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown } from "../../support/stack.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "plain", profile: "plain", leaseTtlMs: 2000 });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

describe("a plain device in a gateway group", () => {
  it("after a failover the new active gateway grants above every token the old one granted, from etcd's counter alone", async () => {
    const a = await group.oneActive();
    const tokens: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await ctl.request(VALVE, "lease/acquire", { holder: "line-a", ttlMs: 30_000 });
      tokens.push(r.lease.token as number);
      expect(
        await ctl.request(VALVE, "command", { holder: "line-a", token: r.lease.token, seq: 1, set: { position: 10 + i } }),
      ).toMatchObject({ ok: true });
      await ctl.request(VALVE, "lease/release", { holder: "line-a", token: r.lease.token });
    }
    await group.daemons[a]!.kill("SIGKILL");
    const b = await group.waitActive(10_000, [1 - a]);
    const taken = group.daemons[b]!.logs.findLast((l) => l.msg === "actuator taken over");
    expect(taken?.token).toBe(tokens.at(-1)! + 1); // one above the old gateway's last grant, which b's journal never had
    const next = await ctl.request(VALVE, "lease/acquire", { holder: "line-a", ttlMs: 30_000 });
    expect(next.lease.token).toBe(tokens.at(-1)! + 2);
    expect(await ctl.request(VALVE, "command", { holder: "line-a", token: next.lease.token, seq: 1, set: { position: 50 } })).toMatchObject(
      { ok: true, outcome: "applied" },
    );
  });
});
