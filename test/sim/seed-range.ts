/** Registers one test that runs a range of simulator seeds and fails with a replay command. */
import { expect, it } from "vitest";
import { runSeed } from "../../src/sim/run.ts";

export function checkSeeds(first: number, count: number): void {
  it(`seeds ${first}..${first + count - 1}: no violation`, async () => {
    const failures: string[] = [];
    for (let seed = first; seed < first + count; seed++) {
      const result = await runSeed(seed);
      if (result.violations.length > 0) failures.push(`seed ${seed} (replay: npm run sim -- --seed ${seed}):\n  ${result.violations.join("\n  ")}`);
    }
    expect(failures.join("\n")).toBe("");
  });
}
