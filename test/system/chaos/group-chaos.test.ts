/**
 * The short gateway-group chaos run of the default suite (the full one: `npm run chaos --
 * --group`, 60 faults): twelve faults among gateway kills and pauses, etcd member restarts,
 * cuts and stalls of the gateways' device links and zombies (a write stuck in the link of an
 * active gateway that is then paused until the other takes over), under load from three controller
 * processes; then the checker: no stale write applied, no token granted twice, the device's
 * history monotonic. FENCEGATE_SEED replays a schedule.
 */
import { describe, expect, it } from "vitest";
import { runGroupChaos } from "./group.ts";
import { report } from "./harness.ts";

const SEED = Number(process.env.FENCEGATE_SEED ?? Date.now() % 2 ** 31);

describe("gateway group chaos on real processes", () => {
  it("keeps every safety property through 12 faults: gateway kills and pauses, etcd member restarts, link cuts and stalls, zombies", async () => {
    const result = await runGroupChaos({ faults: 12, seed: SEED });
    const text = report(result);
    console.info(text);
    expect(result.verdict.violations, text).toEqual([]);
    expect(result.counts.faults).toBe(12);
    // The load was real and the group failed over: commands applied, controllers heard of it.
    expect(result.counts.takeovers).toBeGreaterThanOrEqual(2);
    expect(result.verdict.appliedAtDevice).toBeGreaterThan(50);
    expect(result.verdict.appliedReplies).toBeGreaterThan(50);
  }, 240_000);
});
