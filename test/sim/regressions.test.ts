/**
 * Seeds that once found a violation, kept so the story they tell stays fixed. Each names
 * what the simulator caught.
 */
import { describe, expect, it } from "vitest";
import { runSeed } from "../../src/sim/run.ts";

describe("seeds that once found a violation", () => {
  // A grant's commit failed (the process crashed before its sync) while a later step of the
  // same actuator, already decided, waited in its chain: that step's safe write still went to
  // the device under the token that never became durable, and the restarted gateway granted
  // the same token again. After a failed commit nothing more may be carried out.
  it("1020398: nothing goes to the device after a grant's commit failed", async () => {
    expect((await runSeed(1020398)).violations).toEqual([]);
  });
});
