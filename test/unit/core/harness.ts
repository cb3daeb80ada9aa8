/** A tiny driver for the pure core: feeds inputs, keeps the state, collects effects, asserts the invariants after every step. */
import { EMPTY_SNAPSHOT, initialState, step, type DurableSnapshot } from "../../../src/core/actuator.ts";
import { afterRestart, applyRecord } from "../../../src/core/durable.ts";
import { assertStep } from "../../../src/core/invariants.ts";
import type { ActuatorConfig, ActuatorState, AuditRecord, Effect, Input, Outcome, Reply } from "../../../src/core/types.ts";

export const CONFIG: ActuatorConfig = {
  points: {
    position: { writable: true, min: 0, max: 100 },
    speed: { writable: true, min: 1, max: 10 },
    actual: { writable: false, min: 0, max: 100 },
  },
  expiryPolicy: { kind: "hold" },
  limits: { minTtlMs: 100, maxTtlMs: 60_000, queueLimit: 4, recentLimit: 8, safeRetryMinMs: 100, safeRetryMaxMs: 1_600 },
};

type WithoutTime<T> = T extends unknown ? Omit<T, "nowMs"> : never;

export class CoreDriver {
  state: ActuatorState;
  nowMs = 1_000;
  /** Every effect ever emitted, in order. */
  readonly log: Effect[] = [];
  /**
   * The fold of every record known durable: each grant's, and with it every audit record
   * before it (one ordered stream: a grant's commit carries the audit records queued before it).
   */
  durable: DurableSnapshot = EMPTY_SNAPSHOT;
  /** Audit records handed to the journal since the last grant: what a crash may lose. */
  pendingAudit: AuditRecord[] = [];
  /** Above the small refs some tests pick by hand, so a drawn ref never answers for theirs. */
  private nextRef = 1_000;

  constructor(
    readonly config: ActuatorConfig = CONFIG,
    online = true,
  ) {
    this.state = initialState(EMPTY_SNAPSHOT);
    if (online) this.feed({ type: "link", online: true });
  }

  feed(input: WithoutTime<Input>): Effect[] {
    const full = { ...input, nowMs: this.nowMs } as Input;
    const result = step(this.config, this.state, full);
    assertStep(this.config, this.state, full, result);
    this.state = result.state;
    this.log.push(...result.effects);
    for (const e of result.effects) {
      if (e.kind === "audit") this.pendingAudit.push(e.record);
      if (e.kind === "persist") {
        this.keepAudit(this.pendingAudit.length);
        this.durable = applyRecord(this.durable, e.record, this.config.limits.recentLimit);
      }
    }
    return [...result.effects];
  }

  /** The first `count` pending audit records become durable; the rest are gone. */
  private keepAudit(count: number): void {
    for (const record of this.pendingAudit.slice(0, count))
      this.durable = applyRecord(this.durable, record, this.config.limits.recentLimit);
    this.pendingAudit = [];
  }

  /**
   * The gateway process dies and starts again over what was durable: a `restart`, then the
   * link. `auditKept`: how many of the audit records since the last grant had been committed
   * (default all: a clean stop commits them); a crash loses the others.
   */
  restart(online = true, auditKept = Number.POSITIVE_INFINITY): Effect[] {
    this.keepAudit(Math.min(auditKept, this.pendingAudit.length));
    this.state = initialState(afterRestart(this.durable));
    const effects = this.feed({ type: "restart" });
    if (online) effects.push(...this.feed({ type: "link", online: true }));
    return effects;
  }

  advance(ms: number): Effect[] {
    this.nowMs += ms;
    return this.feed({ type: "tick" });
  }

  ref(): number {
    return this.nextRef++;
  }

  /** Sends a request and returns the reply addressed to it in this step (if any). */
  request(input: WithoutTime<Extract<Input, { ref: unknown }>>): { reply: Reply | undefined; effects: Effect[] } {
    const effects = this.feed(input);
    return { reply: replyTo(effects, input.ref), effects };
  }

  acquire(holder: string, ttlMs = 1_000): Reply | undefined {
    return this.request({ type: "acquire", ref: this.ref(), holder, ttlMs }).reply;
  }

  /** Issues a command and, if it reached the device, completes it with `outcome`. */
  command(
    holder: string,
    token: number,
    seq: number,
    set: Record<string, number> = { position: 50 },
    outcome: Outcome | null = { kind: "applied", applied: set },
  ): Reply | undefined {
    const ref = this.ref();
    const first = this.request({ type: "command", ref, holder, token, seq, set, deadlineMs: 5_000 });
    if (first.reply) return first.reply;
    if (outcome === null) return undefined;
    const write = first.effects.find((e) => e.kind === "deviceWrite");
    if (!write || write.kind !== "deviceWrite") return undefined;
    return replyTo(this.feed({ type: "deviceResult", token: write.token, seq: write.seq, outcome }), ref);
  }

  deviceWrites(): Extract<Effect, { kind: "deviceWrite" }>[] {
    return this.log.filter((e): e is Extract<Effect, { kind: "deviceWrite" }> => e.kind === "deviceWrite");
  }
}

export function replyTo(effects: readonly Effect[], ref: number | null): Reply | undefined {
  for (const e of effects) if (e.kind === "reply" && e.ref === ref) return e.reply;
  return undefined;
}

export function codeOf(reply: Reply | undefined): string | undefined {
  if (reply === undefined) return undefined;
  return reply.ok ? "OK" : reply.error.code;
}

export function tokenOf(reply: Reply | undefined): number {
  if (reply && reply.ok && "lease" in reply && reply.lease) return reply.lease.token;
  throw new Error(`expected a granted lease, got ${JSON.stringify(reply)}`);
}
