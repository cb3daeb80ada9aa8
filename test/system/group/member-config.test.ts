/**
 * Group members with different actuators: each publishes its actuator configuration in
 * etcd; a member whose configuration differs from another's does not take over, says which
 * actuators differ and how (log, doctor), and takes over once it matches.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configDifferences } from "../../../src/adapters/etcd/actuator-digest.ts";
import { publishedConfig } from "../../../src/config/etcd.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { checkGroup } from "../../../src/doctor/checks.ts";
import { valve, valvePoints } from "../../support/daemon.ts";
import { GATEWAYS, VALVE, isServing, startGroup, statusTopic, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport, stopDaemon } from "../../support/stack.ts";

/** valve-1 with a narrower range and a safe value: what gw-b had in the review. */
const narrower = (config: Record<string, any>) => ({
  ...config,
  actuators: [
    valve(VALVE, "plc", 1, "fenced", {
      points: { ...valvePoints("fenced"), position: { ...valvePoints("fenced").position, max: 50 } },
      expiry: { policy: "safe", set: { position: 0 } },
    }),
  ],
});

describe("what a member publishes about its actuators", () => {
  const base = parseConfig({
    gatewayId: "gw-a",
    mqtt: { url: "mqtt://127.0.0.1:1883" },
    buses: { plc: { type: "tcp", host: "127.0.0.1" } },
    actuators: [valve("valve-1", "plc", 1), valve("valve-2", "plc", 2)],
    journal: { path: "/tmp/j.db" },
  });

  it("is the same for configurations that differ only in bus and gateway id, and names every difference otherwise", () => {
    const other = parseConfig({ ...base, gatewayId: "gw-b", buses: { plc: { type: "tcp", host: "10.0.0.9" } } });
    expect(publishedConfig(other).digest).toBe(publishedConfig(base).digest);
    expect(configDifferences(publishedConfig(base), publishedConfig(other))).toEqual([]);

    const b = parseConfig({ ...narrower({ ...base }), gatewayId: "gw-b", leases: { ...base.leases, maxTtlMs: 30_000 } });
    expect(configDifferences(publishedConfig(base), publishedConfig(b))).toEqual([
      'valve-1: expiry.policy "hold" here, "safe" on gw-b',
      'valve-1: expiry.set unset here, {"position":0} on gw-b',
      "valve-1: points.position.max 100 here, 50 on gw-b",
      "valve-2: configured here, not on gw-b",
      "leases and commands: maxTtlMs 300000 here, 30000 on gw-b",
    ]);
  });

  it("names at most eight differences, and counts the rest", () => {
    const many = parseConfig({ ...base, actuators: Array.from({ length: 12 }, (_, i) => valve(`v-${i}`, "plc", i + 1)) });
    const found = configDifferences(publishedConfig(base), { ...publishedConfig(many), gateway: "gw-b" });
    expect(found).toHaveLength(9);
    expect(found[8]).toBe("and 6 more");
  });
});

const teardown = new Teardown();
let group: GroupStack;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "configs", leaseTtlMs: 2000 });
});

afterAll(() => teardown.run());

describe("members with different actuators", () => {
  it("the one that differs stands by and says how it differs, even with the leader key free; the doctor fails it; configured alike, it takes over", async () => {
    const a = group.start(0);
    await group.waitActive(15_000, [0]);
    const b = group.start(1, narrower);
    const report = () => group.daemons.map((d) => daemonReport(d ?? undefined, 12)).join("\n\n");
    const differs = await b.waitForLog((l) => l.code === "GROUP_CONFIG_DIFFERS", 15_000, "the configuration difference");
    expect(differs.level).toBe(50);
    expect(differs.msg).toBe(
      'this gateway\'s actuators are configured differently from gw-a\'s, so it does not take over: valve-1: expiry.policy "safe" here, "hold" on gw-a; valve-1: expiry.set {"position":0} here, unset on gw-a; valve-1: points.position.max 50 here, 100 on gw-a. ' +
        "Give every member of group configs the same actuators; if gw-a has left the group for good, remove what it published (etcdctl del /fencegate/configs/members/gw-a).",
    );

    await stopDaemon(a); // gives the leader key up at once
    await new Promise((r) => setTimeout(r, 3 * group.leaseTtlMs));
    expect(b.logs.some(isServing), report()).toBe(false);
    expect(group.status.last(statusTopic(1))?.payload).toBe("standby");

    const bConfig = parseConfig(narrower({ ...JSON.parse(JSON.stringify(group.configOf(1))) }));
    const finding = await checkGroup(bConfig.group!, bConfig);
    expect(finding).toMatchObject({ check: "group etcd", status: "fail" });
    expect(finding.message).toContain("valve-1: points.position.max 50 here, 100 on gw-a");

    await stopDaemon(b);
    group.start(1); // configured as gw-a
    await group.waitActive(15_000, [1]);
    expect(GATEWAYS[1]).toBe("gw-b");
  });
});
