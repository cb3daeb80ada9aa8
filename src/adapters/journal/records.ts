/**
 * Shape checks shared by the journals: what `commit` accepts (so that whatever is stored
 * can be read back exactly), and what `load` accepts from disk. A journal that stored a
 * value it cannot read back would only fail at the next restart, when the daemon must not
 * start; refusing the record at commit time fails the one decision instead.
 */
import type { JournalEntry } from "../../shell/ports.ts";
import type { Outcome, PointValues } from "../../core/types.ts";

/** The codes a failed outcome may carry. */
export const FAILURE_CODES = ["DEVICE_REJECTED", "DEVICE_ERROR", "DEVICE_UNAVAILABLE", "OUTCOME_UNKNOWN"] as const;
const FAILURE_CODE_SET: ReadonlySet<string> = new Set(FAILURE_CODES);

/** Tokens and seqs are stored as SQLite INTEGERs and handled as JS numbers: 0..2^53-1. */
export function isCount(x: unknown): x is number {
  return typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
}

export function isPointValues(x: unknown): x is PointValues {
  if (typeof x !== "object" || x === null || Array.isArray(x)) return false;
  return Object.values(x).every((v) => typeof v === "number" && Number.isFinite(v));
}

export function isOutcome(x: unknown): x is Outcome {
  if (typeof x !== "object" || x === null) return false;
  const o = x as Record<string, unknown>;
  if (o["kind"] === "applied") return isPointValues(o["applied"]);
  if (o["kind"] !== "failed") return false;
  return (
    typeof o["code"] === "string" &&
    FAILURE_CODE_SET.has(o["code"]) &&
    typeof o["message"] === "string" &&
    (o["modbusCode"] === undefined || Number.isSafeInteger(o["modbusCode"]))
  );
}

/** Why the entry cannot be stored faithfully, or null when it can. */
function entryProblem(entry: JournalEntry): string | null {
  const { actuator, record } = entry;
  if (typeof actuator !== "string" || actuator.length === 0) return "the actuator id must be a non-empty string";
  if (!isCount(record.token)) return `token ${String(record.token)} is not an integer from 0 to 2^53-1`;
  switch (record.type) {
    case "granted":
      return typeof record.holder === "string" ? null : "holder must be a string";
    case "fenceObserved":
      return record.seq === null || isCount(record.seq) ? null : `seq ${String(record.seq)} is not null or an integer from 0 to 2^53-1`;
    case "intent":
      if (typeof record.holder !== "string") return "holder must be a string";
      if (!isCount(record.seq)) return `seq ${String(record.seq)} is not an integer from 0 to 2^53-1`;
      return isPointValues(record.set) ? null : "set must map point names to finite numbers";
    case "outcome":
      if (!isCount(record.seq)) return `seq ${String(record.seq)} is not an integer from 0 to 2^53-1`;
      return isOutcome(record.outcome) ? null : "outcome is not an applied or failed outcome";
    default:
      return `unknown record type ${JSON.stringify((record as { type?: unknown }).type)}`;
  }
}

/**
 * Throws a RangeError naming the first entry that cannot be stored. Called before anything
 * is written, so a refused commit stores nothing. These are caller bugs, not journal faults.
 */
export function assertStorable(entries: readonly JournalEntry[]): void {
  entries.forEach((entry, i) => {
    const problem = entryProblem(entry);
    if (problem !== null)
      throw new RangeError(`journal entry ${i} (${entry.record?.type} for ${JSON.stringify(entry.actuator)}) cannot be stored: ${problem}`);
  });
}

export function assertRecentLimit(recentLimit: number): void {
  if (!isCount(recentLimit)) throw new RangeError(`recentLimit must be an integer from 0 to 2^53-1, got ${recentLimit}`);
}
