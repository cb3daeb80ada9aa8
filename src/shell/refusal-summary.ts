/**
 * Refusals in the log: one line per actuator, holder and code per interval, with the count,
 * instead of one line per refused request. A client that floods the request topics (issue
 * 22: 12,000 lines/s) would otherwise fill the SD card and push the gateway's own lines past
 * journald's rate limit. Each refusal is still on `B/A/events`, in /metrics, and at debug.
 */
import type { Logger } from "pino";
import type { Clock, Scheduler } from "./ports.ts";

/** How often refusals are summarised in the log. */
export const REFUSAL_SUMMARY_MS = 10_000;
/**
 * Distinct (actuator, holder, code) kept per interval; beyond it refusals are counted by code
 * alone: a flood that draws a new holder or actuator name per request stays a few lines.
 */
export const MAX_SUMMARY_KEYS = 64;
/** Codes a well-behaved client gets routinely (a standby waiting for the lease): summarised at debug. */
const ROUTINE_CODES: ReadonlySet<string> = new Set(["LEASE_HELD"]);

interface Entry {
  readonly actuator: string | null;
  readonly holder: string | null;
  readonly code: string;
  count: number;
}

export class RefusalSummary {
  private entries = new Map<string, Entry>();
  private cancel: (() => void) | null = null;
  private sinceMs = 0;

  constructor(
    private readonly log: Logger,
    private readonly clock: Clock,
    private readonly scheduler: Scheduler,
    private readonly intervalMs: number = REFUSAL_SUMMARY_MS,
  ) {}

  /** One refusal of `holder`'s request (null: no holder, or one of too many). */
  note(actuator: string | null, holder: string | null, code: string): void {
    if (this.cancel === null) {
      this.sinceMs = this.clock.monotonicMs();
      this.cancel = this.scheduler.at(this.sinceMs + this.intervalMs, () => {
        this.cancel = null;
        this.flush();
      });
    }
    let key = `${actuator ?? ""}\u0000${holder ?? ""}\u0000${code}`;
    let entry = this.entries.get(key);
    if (entry === undefined && this.entries.size >= MAX_SUMMARY_KEYS) {
      // Codes are few; actuator and holder levels are the sender's to choose.
      actuator = null;
      holder = null;
      key = `\u0000\u0000${code}`;
      entry = this.entries.get(key);
    }
    if (entry === undefined) this.entries.set(key, { actuator, holder, code, count: 1 });
    else entry.count++;
  }

  /** Writes the lines of the refusals noted so far, and starts over. */
  flush(): void {
    this.cancel?.();
    this.cancel = null;
    const entries = this.entries;
    if (entries.size === 0) return;
    this.entries = new Map();
    const intervalMs = this.clock.monotonicMs() - this.sinceMs;
    for (const { actuator, holder, code, count } of entries.values()) {
      const level = ROUTINE_CODES.has(code) ? "debug" : "info";
      const who = holder === null ? "requests without a holder (or of many holders)" : `requests of ${holder}`;
      const where = actuator === null ? " (to many actuator names)" : "";
      this.log[level](
        { actuator, holder, code, count, intervalMs },
        `refused ${count} ${who}${where} with ${code} in the last ${Math.round(intervalMs / 1000)} s`,
      );
    }
  }
}
