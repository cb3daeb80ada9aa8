/**
 * A gateway taken out of its group: its journal remembers the group, and started without a
 * group section it refuses (exit 78), naming `fencegate journal leave-group`; that command
 * says what leaving means, and after it the gateway starts alone. Started alone, a gateway
 * whose fenced device carries a fence above its journal (the other member's takeover) warns.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../../support/controller.ts";
import { VALVE, startGroup, type GroupStack } from "../../support/group.ts";
import { runFencegate } from "../../support/processes.ts";
import { Teardown, daemonReport, stopDaemon } from "../../support/stack.ts";

const teardown = new Teardown();
let group: GroupStack;
let ctl: TestController;
/** The gateway left in the group (stopped, its configuration file still with the group section). */
let member = 0;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "leave", leaseTtlMs: 2000 });
  ctl = teardown.add(await TestController.connect(group.broker.url, "line-a"), (c) => c.close());
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

const withoutGroup = (config: Record<string, unknown>) => {
  const { group: _, ...alone } = config;
  return alone;
};

describe("leaving a gateway group", () => {
  it("a journal that served in a group refuses to start without one until journal leave-group; alone, a device fence above the journal is warned about", async () => {
    const a = await group.oneActive(30_000);
    const b = 1 - a;
    member = a;
    const report = () => group.daemons.map((d) => daemonReport(d ?? undefined, 12)).join("\n\n");
    expect(await ctl.request(VALVE, "lease/acquire", { holder: "line-a", ttlMs: 60_000 }, { timeoutMs: 8000 }), report()).toMatchObject({
      ok: true,
    });

    // b takes over (its journal gets a takeover token), then a takes over again above it.
    await stopDaemon(group.daemons[a]!);
    await group.waitActive(15_000, [b]);
    group.start(a);
    await group.status.waitFor((m) => m.topic === `fencegate/gateway/${["gw-a", "gw-b"][a]}/status` && m.payload === "standby", {
      timeoutMs: 15_000,
      what: "the restarted gateway standing by",
    });
    await stopDaemon(group.daemons[b]!);
    await group.waitActive(15_000, [a]);
    await stopDaemon(group.daemons[a]!);

    const refused = group.start(b, withoutGroup);
    expect(await refused.exited).toEqual({ code: 78, signal: null });
    const fatal = refused.logs.find((l) => l.level === 60)!;
    expect(fatal).toMatchObject({
      code: "JOURNAL_IN_GROUP",
      group: "leave",
      leaveGroup: `fencegate journal leave-group --config ${group.configFile(b)}`,
    });
    expect(fatal.msg).toMatch(
      /served in gateway group "leave", and this configuration has no group section: alone, this gateway would serve its actuators beside the group's active gateway/,
    );

    const left = await runFencegate(["journal", "leave-group", "--config", group.configFile(b)], { timeoutMs: 30_000 });
    expect(left.code, left.stderr).toBe(0);
    expect(left.stdout).toMatch(/has left gateway group "leave": the gateway now starts alone/);
    expect(left.stdout).toMatch(/Make sure no member of "leave" serves them any more/);
    expect((await runFencegate(["journal", "leave-group", "--config", group.configFile(b)], { timeoutMs: 30_000 })).stdout).toMatch(
      /was not in a gateway group: nothing changed\.$/m,
    );

    const alone = group.start(b, withoutGroup);
    const warned = await alone.waitForLog(
      (l) => l.level === 40 && /^the device's fence is above this gateway's journal/.test(l.msg ?? ""),
      15_000,
      "the fence warning",
    );
    expect(warned.actuator).toBe(VALVE);
    expect(warned.deviceToken as number).toBeGreaterThan(warned.highestGranted as number);
    expect(alone.child.exitCode).toBeNull();
  });

  it("leave-group refuses while the configuration still has the group section", async () => {
    const still = await runFencegate(["journal", "leave-group", "--config", group.configFile(member)], { timeoutMs: 30_000 });
    expect(still.code).toBe(78);
    expect(still.stderr).toMatch(/the configuration still has a group section \(group "leave"\): remove it first/);
  });
});
