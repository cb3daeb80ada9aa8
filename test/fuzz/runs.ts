/**
 * How hard the fuzz properties try: 1000 cases each in the default suite, more with
 * FENCEGATE_FUZZ_RUNS (`npm run fuzz` sets 10000). FENCEGATE_FUZZ_SEED replays a failure
 * (fast-check prints the seed and path of every counterexample).
 */
import type { Parameters } from "fast-check";

export const FUZZ_RUNS = Number(process.env.FENCEGATE_FUZZ_RUNS ?? 1000);

export function runs<T>(): Parameters<T> {
  const seed = process.env.FENCEGATE_FUZZ_SEED;
  return { numRuns: FUZZ_RUNS, ...(seed !== undefined ? { seed: Number(seed) } : {}) };
}

/** A test's time budget: generous for the big runs. */
export const FUZZ_TIMEOUT_MS = Math.max(60_000, FUZZ_RUNS * 60);
