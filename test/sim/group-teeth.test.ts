/**
 * The checker's group rules have teeth: with ActuatorGroupRole broken so that it no longer
 * holds an actuator's inputs while a grant waits for the group's answer, group seeds show a
 * lease replied on a token the group never committed (a retried acquire answered as the live
 * holder's while etcd has not confirmed, or has refused, the grant).
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { ActuatorGroupRole } from "../../src/shell/group-role.ts";
import { runSeed } from "../../src/sim/run.ts";

const MAX_SEEDS = 200;

afterEach(() => vi.restoreAllMocks());

describe("the simulator's checker catches a broken group rule", () => {
  it("inputs decided while a grant is unsettled", async () => {
    vi.spyOn(ActuatorGroupRole.prototype, "holds").mockReturnValue(false);
    let found: string | undefined;
    for (let seed = 1; seed <= MAX_SEEDS && found === undefined; seed++) {
      const result = await runSeed(seed, { group: true, invariants: false });
      found = result.violations.find((v) => /replied by \S+ without its commit in the group's counter/.test(v));
    }
    expect(found, `no violation in ${MAX_SEEDS} group seeds`).toBeDefined();
  });
});
