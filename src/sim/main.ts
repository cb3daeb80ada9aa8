/**
 * npm run sim -- --seeds N [--seed S] [--trace]
 *
 * Runs N seeds (from S, or from a seed drawn from the time) of the deterministic simulator
 * and prints what was injected, what the gateway decided and every violation. Exits 1 on
 * any violation, with the command that replays the failing seed exactly.
 */
import { runSeed, type SimResult } from "./run.ts";
import { EXIT } from "../exit-codes.ts";

const USAGE = "usage: npm run sim -- --seeds N [--seed S] [--trace]";

class UsageError extends Error {}

function parseArgs(argv: readonly string[]): { seeds: number; seed: number | null; trace: boolean } {
  let seeds: number | null = null;
  let seed: number | null = null;
  let trace = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = Number(argv[i + 1]);
    if (arg === "--trace") {
      trace = true;
    } else if ((arg === "--seeds" || arg === "--seed") && Number.isSafeInteger(value) && value >= 0) {
      if (arg === "--seeds") seeds = value;
      else seed = value;
      i++;
    } else {
      throw new UsageError(
        arg === "--help" || arg === "-h" ? "" : `${arg} is not an option here, or its value is not a whole number of 0 or more.`,
      );
    }
  }
  return { seeds: seeds ?? (seed === null ? 100 : 1), seed, trace };
}

function add(into: Map<string, number>, from: ReadonlyMap<string, number>): void {
  for (const [k, v] of from) into.set(k, (into.get(k) ?? 0) + v);
}

function table(m: ReadonlyMap<string, number>): string {
  return [...m]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `  ${k.padEnd(34)} ${v}`)
    .join("\n");
}

async function main(): Promise<number> {
  let args: ReturnType<typeof parseArgs>;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    if (err.message === "") {
      console.log(USAGE);
      return 0;
    }
    console.error(`${err.message}\n${USAGE}`);
    return EXIT.USAGE;
  }
  const { seeds, seed, trace } = args;
  // Not a decision input: only picks where an unseeded batch starts; every seed is printed.
  const first = seed ?? (Date.now() % 1_000_000) * 1000;
  const faults = new Map<string, number>();
  const refused = new Map<string, number>();
  let accepted = 0;
  let safeWrites = 0;
  let applied = 0;
  let grants = 0;
  let events = 0;
  const failed: SimResult[] = [];
  const started = performance.now();
  for (let i = 0; i < seeds; i++) {
    const result = await runSeed(first + i, trace ? { trace: (line) => console.log(line) } : {});
    add(faults, result.faults);
    add(refused, result.refused);
    accepted += result.accepted;
    safeWrites += result.safeWrites;
    applied += result.applied;
    grants += result.grants;
    events += result.events;
    if (result.violations.length > 0) {
      failed.push(result);
      console.log(`seed ${result.seed}: ${result.violations.length} violation(s)`);
      for (const v of result.violations) console.log(`  ${v}`);
      console.log(`  replay: npm run sim -- --seed ${result.seed}`);
    }
  }
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `seeds run: ${seeds} (${first}..${first + seeds - 1}) in ${seconds.toFixed(1)} s, ${(seeds / seconds).toFixed(1)} seeds/s, ${events} events`,
  );
  console.log(`faults injected by kind:\n${table(faults)}`);
  console.log(`leases granted: ${grants}`);
  console.log(
    `commands accepted (written to a device): ${accepted}, of which the gateway's own safe-value writes: ${safeWrites}; replied applied: ${applied}`,
  );
  console.log(`refused by code:\n${table(refused)}`);
  console.log(`violations: ${failed.reduce((n, r) => n + r.violations.length, 0)} in ${failed.length} seed(s)`);
  if (failed.length > 0) console.log(`first failing seed: npm run sim -- --seed ${failed[0]!.seed}`);
  return failed.length > 0 ? 1 : 0;
}

process.exitCode = await main();
