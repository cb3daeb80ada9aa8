/**
 * The simulator's crash points are reached, not only declared: each kind of gateway crash
 * happens within the first seeds of the default run (a point that never fires proves nothing).
 */
import { describe, expect, it } from "vitest";
import { runSeed } from "../../src/sim/run.ts";

const SEEDS = 100;
const CRASH_POINTS = [
  "afterWriteBeforeAudit", // after the device write, before its audit commit
  "atAuditLagBound", // the audit writer holding its maximum lag, lost before its sync
  "afterDeviceActed",
  "beforeGrantSynced",
  "afterGrantSynced",
  "beforeOutcomeSynced",
  "afterOutcomeSynced",
  "anytime",
  "atHalt",
];

describe("simulator crash points", () => {
  it(`each is reached within seeds 1..${SEEDS}`, async () => {
    const seen = new Map<string, number>();
    for (let seed = 1; seed <= SEEDS; seed++) {
      for (const [kind, n] of (await runSeed(seed)).faults) seen.set(kind, (seen.get(kind) ?? 0) + n);
    }
    const missing = CRASH_POINTS.filter((point) => !seen.has(`gateway.crash.${point}`));
    expect(missing).toEqual([]);
  });
});
