/**
 * A decision's event, told everywhere it goes: the log (at its level), the refusal summary,
 * and the outbox (B/A/events, the metrics, the status page).
 */
import type { Logger } from "pino";
import type { CoreEvent } from "../core/types.ts";
import type { Clock, Outbox } from "./ports.ts";
import type { RefusalSummary } from "./refusal-summary.ts";

/**
 * Every decision is logged: a lease's grant, end and expiry and device trouble at info; the
 * routine rest at debug (B/A/events carries them all): a command's accepted/applied pair, a
 * renewal, so that a busy gateway or a short lease renewed every second does not write a
 * journald line a second to the SD card. Refusals are at debug one by one and summarised
 * (refusal-summary.ts), the LEASE_HELD a waiting standby gets at debug there too.
 */
function decisionLevel(event: CoreEvent): "debug" | "info" {
  switch (event.type) {
    case "accepted":
    case "applied":
    case "renewed":
    case "rejected":
      return "debug";
    default:
      return "info";
  }
}

export class DecisionEvents {
  constructor(
    private readonly log: Logger,
    private readonly clock: Clock,
    private readonly outbox: Outbox,
    private readonly refusals: RefusalSummary,
  ) {}

  publish(actuator: string, event: CoreEvent): void {
    if (event.type === "rejected") this.refusals.note(actuator, event.holder ?? null, event.code ?? "");
    const level = decisionLevel(event);
    // The line says "refused", the word of the page, watch and the refusal summary; `type` keeps the wire's.
    if (this.log.isLevelEnabled(level)) this.log[level]({ actuator, ...event }, event.type === "rejected" ? "refused" : event.type); // no object built for a line not written
    this.outbox.event(actuator, { ...event, at: this.clock.wallNow() });
  }
}
