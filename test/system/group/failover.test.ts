/**
 * Hot standby on etcd with real parts: two gateway daemons, etcd-server, Mosquitto and the
 * simulated fenced valve over Modbus TCP, one named scenario per test. The lease TTL is 2 s.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController, type Json } from "../../support/controller.ts";
import { GATEWAYS, VALVE, isSteppingDown, startGroup, statusTopic, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport } from "../../support/stack.ts";
import { until } from "../../support/watch.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;
let seq = 0;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "failover", leaseTtlMs: 2000 });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
});

afterAll(() => teardown.run());

const report = () => group.daemons.map((d, i) => `${GATEWAYS[i]}: ${daemonReport(d ?? undefined, 15)}`).join("\n\n");

async function acquire(holder = "line-a"): Promise<number> {
  const reply = await ctl.request(VALVE, "lease/acquire", { holder, ttlMs: 30_000 });
  expect(reply, JSON.stringify(reply)).toMatchObject({ ok: true });
  return reply.lease.token as number;
}

function command(token: number, position: number, holder = "line-a"): Promise<Json> {
  return ctl.request(VALVE, "command", { holder, token, seq: ++seq, set: { position } });
}

/** Both gateways up, one active and the other standing by (as their status topics say): the active one's index. */
async function bothUp(): Promise<number> {
  for (let i = 0; i < GATEWAYS.length; i++)
    if (group.daemons[i] === null || group.daemons[i]!.child.exitCode !== null || group.daemons[i]!.child.signalCode !== null)
      group.start(i);
  return group.oneActive();
}

describe("gateway group failover", () => {
  it("active gateway SIGKILLed: the standby is active within TTL + 1 s, grants a token above every earlier one, and its commands are applied", async () => {
    const a = await bothUp();
    const b = 1 - a;
    const t1 = await acquire();
    expect(await command(t1, 10)).toMatchObject({ ok: true, outcome: "applied" });

    // Measured by the status topic (the log is buffered for up to 200 ms).
    const mark = group.status.mark();
    const killedAt = performance.now();
    await group.daemons[a]!.kill("SIGKILL");
    await group.status.waitFor((m) => m.topic === statusTopic(b) && m.payload === "active", {
      from: mark,
      timeoutMs: group.leaseTtlMs + 5000,
      what: "the standby saying it is active",
    });
    const activeAfterMs = performance.now() - killedAt;
    console.info(`failover: gw ${GATEWAYS[b]} serving ${Math.round(activeAfterMs)} ms after the kill (TTL ${group.leaseTtlMs} ms)`);
    expect(activeAfterMs, report()).toBeLessThanOrEqual(group.leaseTtlMs + 1000);

    const t2 = await acquire();
    const raised = group.sim.device(1).raises;
    expect(raised.length).toBeGreaterThan(0);
    // Above the old gateway's token, and above the fence the new one raised at takeover.
    expect(t2).toBeGreaterThan(t1);
    expect(t2).toBeGreaterThan(raised.at(-1)!.token);
    expect(await command(t2, 20)).toMatchObject({ ok: true, outcome: "applied", token: t2 });
    const applied = group.sim.device(1).applied;
    expect(applied.at(-1)).toMatchObject({ token: t2, setpoints: { position: 20 } });
    // The device never went back in token.
    const tokens = applied.map((x) => x.token ?? 0);
    expect(tokens).toEqual([...tokens].sort((x, y) => x - y));
    group.start(a); // back as the standby for the next scenario
    await until(() => group.roles()[a] === "standby", { timeoutMs: 15_000, what: "the restarted gateway standing by" });
  });

  it("active gateway SIGSTOPped past its etcd lease: the standby takes over and commands; after SIGCONT the old gateway's queued write is refused by the device, it steps down within a second, and the device never went back in token", async () => {
    const a = await bothUp();
    const b = 1 - a;
    const old = group.daemons[a]!;
    const t1 = await acquire();
    expect(await command(t1, 30)).toMatchObject({ ok: true, outcome: "applied" });

    // The old gateway's next write gets stuck on its way (a converter's buffer, a switch):
    // it passed every check of the old gateway, which is then paused. A poll's read is stuck
    // first, every time (polls come every second): the write waits for it on the bus.
    group.links[a]!.hold();
    await until(() => group.links[a]!.heldBytes > 0, { timeoutMs: 5000, what: "the old gateway's poll held in its link" });
    const staleReply = command(t1, 31).catch((err: unknown) => ({ ok: false, error: { code: "NO_REPLY", message: String(err) } }));
    // Its write, not the read: paused before sending it, the gateway leaves nothing to refuse.
    await until(() => group.links[a]!.heldWrites > 0, { timeoutMs: 5000, what: "the old gateway's write held in its link" });
    old.child.kill("SIGSTOP");

    await group.waitActive(group.leaseTtlMs + 5000, [b]);
    const t2 = await acquire();
    expect(t2).toBeGreaterThan(t1);
    expect(await command(t2, 40)).toMatchObject({ ok: true, outcome: "applied", token: t2 });

    // The stuck frame arrives now, under the old token: the device itself refuses it.
    const refusalsBefore = group.sim.device(1).refusalCount;
    group.links[a]!.release();
    await until(() => group.sim.device(1).refusalCount > refusalsBefore, {
      timeoutMs: 5000,
      what: "the device refusing the old gateway's write",
    });
    expect(group.sim.device(1).lastRefusalReason).toBe(1); // STALE_TOKEN

    const linesBefore = old.logs.length;
    const contAt = performance.now();
    old.child.kill("SIGCONT");
    await old.waitForLog((l) => isSteppingDown(l) && old.logs.indexOf(l) >= linesBefore, 5000, "the old gateway stepping down");
    const steppedDownAfterMs = performance.now() - contAt;
    console.info(`the old gateway stepped down ${Math.round(steppedDownAfterMs)} ms after SIGCONT`);
    expect(steppedDownAfterMs, report()).toBeLessThan(1000);
    expect((await staleReply).ok).toBe(false);
    await until(() => group.roles()[a] === "standby", { timeoutMs: 10_000, what: "the old gateway saying it stands by" });

    const applied = group.sim.device(1).applied;
    expect(applied.some((x) => x.setpoints.position === 31)).toBe(false);
    const tokens = applied.map((x) => x.token ?? 0);
    expect(tokens).toEqual([...tokens].sort((x, y) => x - y));
    expect(group.roles()[b]).toBe("active");
    expect(await command(t2, 41)).toMatchObject({ ok: true, outcome: "applied" });
  });
});
