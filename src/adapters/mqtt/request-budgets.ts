/**
 * Rate budgets of the requests of everyone but an actuator's live lease holder
 * (docs/mqtt-api.md, "A rate budget per requester"), purely: the caller gives the time. A client with no lease could otherwise send
 * more than the gateway can answer, and the holder's renewals, on the same subscription,
 * would wait behind the backlog until their lease ran out. The holder's traffic (its holder
 * name and, but for an acquire, the lease's token) is never counted here: only bounded by
 * what it has in progress (link.ts).
 *
 * Each other requester (its holder name; `_` for a read without one) has a token bucket per
 * actuator, and all of them together a bucket per actuator, so that a flood drawing a new
 * holder name per request is bounded too. Over budget a request is refused OVERLOADED,
 * cheaply: before its full validation and before it reaches the core; and once a requester
 * has been told, its further requests over budget in the next second are dropped unanswered
 * (docs/mqtt-api.md): a reply costs the gateway and the broker about as much as the request,
 * and a flood must cost the gateway as little as can be (test/system/daemon/request-flood.test.ts).
 * Actuators are only those served here and `gateway` (link.ts): the map stays bounded.
 */

/** `mqtt.requestBudget` in the configuration (docs/mqtt-api.md). */
export interface BudgetLimits {
  /** Requests a second one requester gets, per actuator, once its burst is spent. */
  readonly perRequesterPerS: number;
  readonly perRequesterBurst: number;
  /** Requests a second all requesters but the holder get together, per actuator. */
  readonly perActuatorPerS: number;
  readonly perActuatorBurst: number;
}

/** Requesters tracked per actuator; beyond it, those with a full bucket are forgotten, and a new one has only the shared bucket. */
const MAX_REQUESTERS_PER_ACTUATOR = 1024;

/** How long after a requester was refused OVERLOADED its requests over budget are dropped unanswered. */
export const REFUSED_QUIET_MS = 1000;

export type Admission = "admit" | "refuse" | "drop";

interface Bucket {
  tokens: number;
  atMs: number;
  /** When this requester (the shared bucket: anyone, for lack of it) was last refused OVERLOADED. */
  refusedAtMs: number;
}

function refill(b: Bucket, perS: number, burst: number, nowMs: number): void {
  b.tokens = Math.min(burst, b.tokens + ((nowMs - b.atMs) * perS) / 1000);
  b.atMs = nowMs;
}

export class RequestBudgets {
  private readonly actuators = new Map<string, { shared: Bucket; requesters: Map<string, Bucket>; sweptAtMs: number }>();

  constructor(
    private readonly limits: BudgetLimits,
    private readonly maxRequesters: number = MAX_REQUESTERS_PER_ACTUATOR,
  ) {}

  /** Takes one request of `requester` to `actuator` out of its budgets; over budget nothing is taken, and it is refused or dropped. */
  take(actuator: string, requester: string, nowMs: number): Admission {
    const l = this.limits;
    let a = this.actuators.get(actuator);
    if (a === undefined) {
      a = { shared: { tokens: l.perActuatorBurst, atMs: nowMs, refusedAtMs: -Infinity }, requesters: new Map(), sweptAtMs: -Infinity };
      this.actuators.set(actuator, a);
    }
    refill(a.shared, l.perActuatorPerS, l.perActuatorBurst, nowMs);
    let own = a.requesters.get(requester);
    if (own === undefined) {
      // At most one sweep a second: a flood of new names must not make each request cost one.
      if (a.requesters.size >= this.maxRequesters && nowMs - a.sweptAtMs >= 1000) {
        a.sweptAtMs = nowMs;
        this.forgetFull(a.requesters, nowMs);
      }
      own = { tokens: l.perRequesterBurst, atMs: nowMs, refusedAtMs: -Infinity };
      if (a.requesters.size < this.maxRequesters) a.requesters.set(requester, own);
    } else {
      refill(own, l.perRequesterPerS, l.perRequesterBurst, nowMs);
    }
    // Told once a second: the requester over its own budget, or everyone over the shared one
    // (a flood drawing a new name per request would otherwise be answered one by one).
    const over = own.tokens < 1 ? own : a.shared.tokens < 1 ? a.shared : null;
    if (over !== null) {
      if (nowMs - over.refusedAtMs < REFUSED_QUIET_MS) return "drop";
      over.refusedAtMs = nowMs;
      return "refuse";
    }
    own.tokens--;
    a.shared.tokens--;
    return "admit";
  }

  /** Drops the requesters whose bucket has refilled: forgetting them changes nothing. */
  private forgetFull(requesters: Map<string, Bucket>, nowMs: number): void {
    const l = this.limits;
    for (const [k, b] of requesters) {
      refill(b, l.perRequesterPerS, l.perRequesterBurst, nowMs);
      if (b.tokens >= l.perRequesterBurst) requesters.delete(k);
    }
  }
}
