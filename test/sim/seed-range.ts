/**
 * Registers tests that run a range of simulator seeds, in chunks (each its own test, so a
 * loaded machine does not push one long test past its timeout), failing with replay commands.
 */
import { expect, it } from "vitest";
import { runSeed } from "../../src/sim/run.ts";

const CHUNK = 50;

export function checkSeeds(first: number, count: number): void {
  for (let from = first; from < first + count; from += CHUNK) {
    const to = Math.min(from + CHUNK, first + count) - 1;
    it(`seeds ${from}..${to}: no violation`, async () => {
      const failures: string[] = [];
      for (let seed = from; seed <= to; seed++) {
        const result = await runSeed(seed);
        if (result.violations.length > 0)
          failures.push(`seed ${seed} (replay: npm run sim -- --seed ${seed}):\n  ${result.violations.join("\n  ")}`);
      }
      expect(failures.join("\n")).toBe("");
    });
  }
}
