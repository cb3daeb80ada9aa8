/**
 * Invariants of the lease table and fence rule over random interleavings of acquire,
 * renew, release, time, commands and device results from several holders.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { GATEWAY_HOLDER, isLive } from "../../../src/core/actuator.ts";
import type { ActuatorConfig, Effect, Outcome, Reply } from "../../../src/core/types.ts";
import { CONFIG, CoreDriver } from "./harness.ts";

const HOLDERS = ["A", "B", "C"] as const;

type Op =
  | { op: "acquire"; holder: string; ttlMs: number }
  | { op: "renew"; holder: string; tokenDelta: number }
  | { op: "release"; holder: string; tokenDelta: number }
  | { op: "command"; holder: string; tokenDelta: number; seq: number; position: number; deadlineMs: number }
  | { op: "result"; kind: "applied" | "unknown" | "rejected" }
  | { op: "advance"; ms: number }
  | { op: "link"; online: boolean }
  // The lease-ending inputs besides expiry (safe-policy runs only):
  | { op: "restart"; online: boolean; auditKept: number }
  | { op: "shutdown" }
  | { op: "deviceFence"; ahead: number };

const holder = fc.constantFrom(...HOLDERS);
// Controllers mostly use the token they were last given, sometimes an older or a guessed one.
const tokenDelta = fc.oneof(
  { weight: 6, arbitrary: fc.constant(0) },
  { weight: 2, arbitrary: fc.integer({ min: -3, max: -1 }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 2 }) },
);
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant("acquire" as const), holder, ttlMs: fc.integer({ min: 100, max: 1_500 }) }),
  fc.record({ op: fc.constant("renew" as const), holder, tokenDelta }),
  fc.record({ op: fc.constant("release" as const), holder, tokenDelta }),
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant("command" as const),
      holder,
      tokenDelta,
      seq: fc.integer({ min: 0, max: 12 }),
      position: fc.integer({ min: 0, max: 100 }),
      deadlineMs: fc.integer({ min: 1, max: 30_000 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant("result" as const),
      kind: fc.constantFrom("applied" as const, "unknown" as const, "rejected" as const),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 2_500 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("link" as const), online: fc.boolean() }) },
);

/** Besides the above: the gateway restarts or stops, a device reports a fence (often ahead). */
const safeOpArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 12, arbitrary: opArb },
  // A crash keeps some of the audit records written since the last grant, or none, or all.
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant("restart" as const), online: fc.boolean(), auditKept: fc.integer({ min: 0, max: 8 }) }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("shutdown" as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("deviceFence" as const), ahead: fc.integer({ min: 0, max: 3 }) }) },
);

const SAFE: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };

interface History {
  d: CoreDriver;
  /** The token each holder was last granted, as a controller would remember it. */
  granted: Map<string, number>;
  renewReplies: { asked: number; got: number }[];
  acquireAfterExpiry: { highestBefore: number; got: number }[];
}

function outcomeFor(kind: "applied" | "unknown" | "rejected", set: Record<string, number>): Outcome {
  if (kind === "applied") return { kind: "applied", applied: set };
  return { kind: "failed", code: kind === "unknown" ? "OUTCOME_UNKNOWN" : "DEVICE_REJECTED", message: "simulated" };
}

function run(
  ops: Op[],
  config: ActuatorConfig = CONFIG,
  afterStep: (d: CoreDriver, o: Op, effects: readonly Effect[]) => void = () => {},
): History {
  const d = new CoreDriver(config);
  const h: History = { d, granted: new Map(), renewReplies: [], acquireAfterExpiry: [] };
  const seen = (reply: Reply | undefined, who: string) => {
    if (reply?.ok && "lease" in reply && reply.lease) h.granted.set(who, reply.lease.token);
  };
  for (const o of ops) {
    const token = (who: string, delta: number) => Math.max(1, (h.granted.get(who) ?? 1) + delta);
    const logged = d.log.length;
    switch (o.op) {
      case "acquire": {
        const wasUnheld = d.state.lease === null || d.nowMs >= d.state.lease.expiresAtMs;
        const highestBefore = d.state.highestGranted;
        const reply = d.acquire(o.holder, o.ttlMs);
        seen(reply, o.holder);
        if (wasUnheld && reply?.ok && "lease" in reply && reply.lease) h.acquireAfterExpiry.push({ highestBefore, got: reply.lease.token });
        break;
      }
      case "renew": {
        const asked = token(o.holder, o.tokenDelta);
        const { reply } = d.request({ type: "renew", ref: d.ref(), holder: o.holder, token: asked });
        if (reply?.ok && "lease" in reply && reply.lease) h.renewReplies.push({ asked, got: reply.lease.token });
        break;
      }
      case "release":
        d.request({ type: "release", ref: d.ref(), holder: o.holder, token: token(o.holder, o.tokenDelta) });
        break;
      case "command":
        d.feed({
          type: "command",
          ref: d.ref(),
          holder: o.holder,
          token: token(o.holder, o.tokenDelta),
          seq: o.seq,
          set: { position: o.position },
          deadlineMs: o.deadlineMs,
        });
        break;
      case "result": {
        const cmd = d.state.inFlight;
        if (cmd) d.feed({ type: "deviceResult", token: cmd.token, seq: cmd.seq, outcome: outcomeFor(o.kind, cmd.set) });
        break;
      }
      case "advance":
        d.advance(o.ms);
        break;
      case "link":
        d.feed({ type: "link", online: o.online });
        break;
      case "restart":
        d.restart(o.online, o.auditKept);
        break;
      case "shutdown":
        d.feed({ type: "shutdown" });
        break;
      case "deviceFence":
        d.feed({ type: "deviceFence", token: d.state.highestGranted + o.ahead, seq: null });
        break;
    }
    afterStep(d, o, d.log.slice(logged));
    // Invariants that hold after every step.
    expect(d.state.fence.token).toBe(d.state.highestGranted);
    expect(d.state.queue.length).toBeLessThanOrEqual(CONFIG.limits.queueLimit);
    expect(d.state.recent.length).toBeLessThanOrEqual(CONFIG.limits.recentLimit);
    if (d.state.lease) expect(d.state.lease.token).toBe(d.state.highestGranted);
  }
  return h;
}

const interleavings = fc.array(opArb, { minLength: 1, maxLength: 80 });
const RUNS = { numRuns: 1_000 };

function writes(log: readonly Effect[]) {
  return log.filter((e): e is Extract<Effect, { kind: "deviceWrite" }> => e.kind === "deviceWrite");
}

describe("core invariants over random interleavings", () => {
  it("device writes carry strictly increasing (token, seq)", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        const w = writes(run(ops).d.log);
        for (let i = 1; i < w.length; i++) {
          const [a, b] = [w[i - 1]!, w[i]!];
          expect(b.token > a.token || (b.token === a.token && b.seq > a.seq)).toBe(true);
        }
      }),
      RUNS,
    );
  });

  it("never grants a token twice, and grants increase by one", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        const grants = run(ops).d.log.flatMap((e) => (e.kind === "persist" && e.record.type === "granted" ? [e.record.token] : []));
        grants.forEach((t, i) => expect(t).toBe(i + 1));
      }),
      RUNS,
    );
  });

  it("renew never changes a token", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        for (const r of run(ops).renewReplies) expect(r.got).toBe(r.asked);
      }),
      RUNS,
    );
  });

  it("an acquisition after expiry or release always yields a higher token than any before", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        for (const a of run(ops).acquireAfterExpiry) expect(a.got).toBeGreaterThan(a.highestBefore);
      }),
      RUNS,
    );
  });

  it("a command is written to the device only under the newest granted token", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        let highest = 0;
        for (const e of run(ops).d.log) {
          if (e.kind === "persist" && e.record.type === "granted") highest = e.record.token;
          if (e.kind === "deviceWrite") expect(e.token).toBe(highest); // a stale holder's command is never accepted after a newer grant
        }
      }),
      RUNS,
    );
  });

  it("a grant reply always comes after the persist of its token, in the same step", () => {
    fc.assert(
      fc.property(safeInterleavings, (ops) => {
        run(ops, SAFE, (d, _o, effects) => {
          const persisted = new Set<number>();
          for (const e of effects) {
            if (e.kind === "persist") persisted.add(e.record.token);
            if (e.kind === "reply" && e.reply.ok && "lease" in e.reply && e.reply.lease)
              expect(persisted.has(e.reply.lease.token) || e.reply.lease.token <= d.durable.highestGranted).toBe(true);
          }
        });
      }),
      RUNS,
    );
  });

  it("a command's effects contain no persist: commands never wait for the disk", () => {
    fc.assert(
      fc.property(safeInterleavings, (ops) => {
        run(ops, SAFE, (_d, o, effects) => {
          if (o.op === "command" || o.op === "result") expect(effects.filter((e) => e.kind === "persist")).toEqual([]);
        });
      }),
      RUNS,
    );
  });

  it("a reply says applied only after the command's intent and outcome were handed to the journal, in that order", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        const intents = new Set<string>();
        const outcomes = new Set<string>();
        for (const e of run(ops).d.log) {
          if (e.kind === "audit" && e.record.type === "intent") intents.add(`${e.record.token}:${e.record.seq}`);
          if (e.kind === "audit" && e.record.type === "outcome" && e.record.outcome.kind === "applied") {
            expect(intents.has(`${e.record.token}:${e.record.seq}`)).toBe(true);
            outcomes.add(`${e.record.token}:${e.record.seq}`);
          }
          if (e.kind === "reply" && e.reply.ok && "outcome" in e.reply) expect(outcomes.has(`${e.reply.token}:${e.reply.seq}`)).toBe(true);
        }
      }),
      RUNS,
    );
  });

  it("after a crash that lost audit records, nothing under a token granted before it reaches the device", () => {
    fc.assert(
      fc.property(safeInterleavings, (ops) => {
        let highest = 0;
        let floor = 0;
        run(ops, SAFE, (d, o, effects) => {
          if (o.op === "restart") floor = highest; // every token up to here was granted before the crash
          for (const e of effects) if (e.kind === "deviceWrite") expect(e.token).toBeGreaterThan(floor);
          highest = d.state.highestGranted;
        });
      }),
      RUNS,
    );
  });

  it("every request gets exactly one reply", () => {
    fc.assert(
      fc.property(interleavings, (ops) => {
        const { d } = run(ops);
        // Flush: complete whatever is at the device and let every deadline pass.
        for (let i = 0; i < 20 && d.state.inFlight; i++) {
          const cmd = d.state.inFlight;
          d.feed({ type: "deviceResult", token: cmd.token, seq: cmd.seq, outcome: { kind: "applied", applied: cmd.set } });
        }
        d.advance(10_000);
        const counts = new Map<number, number>();
        for (const e of d.log) if (e.kind === "reply" && e.ref !== null) counts.set(e.ref, (counts.get(e.ref) ?? 0) + 1);
        for (const n of counts.values()) expect(n).toBe(1);
        expect(d.state.queue).toHaveLength(0);
      }),
      RUNS,
    );
  });
});

/**
 * What the device may be at, as an observer of the effects sees it (not the core's own
 * bookkeeping): a controller's write sent and no safe write confirmed since, and how the
 * newest lease ended.
 */
class SafeModel {
  atControllerValue = false;
  endedBy: "release" | "other" | null = null;

  observe(d: CoreDriver, o: Op, effects: readonly Effect[]): void {
    for (const e of effects) {
      if (e.kind === "deviceWrite" && e.holder !== GATEWAY_HOLDER) this.atControllerValue = true;
      if (e.kind === "event" && e.event.type === "expired") this.endedBy = "other";
      if (e.kind === "event" && e.event.type === "released") this.endedBy = "release";
      if (e.kind === "event" && e.event.type === "granted") this.endedBy = null;
      if (
        e.kind === "audit" &&
        e.record.type === "outcome" &&
        e.record.outcome.kind === "applied" &&
        this.lastWriteHolder(d, e.record.token, e.record.seq) === GATEWAY_HOLDER
      ) {
        this.atControllerValue = false;
      }
    }
    // A restart ends a lease that was live then, expired event or not.
    if (o.op === "restart" && this.endedBy === null) this.endedBy = "other";
  }

  private lastWriteHolder(d: CoreDriver, token: number, seq: number): string | undefined {
    return d.deviceWrites().findLast((w) => w.token === token && w.seq === seq)?.holder;
  }

  /** A controller's value may be at the device, its lease ended other than by release, and no lease is live. */
  owed(d: CoreDriver): boolean {
    return this.atControllerValue && this.endedBy === "other" && !isLive(d.state.lease, d.nowMs);
  }
}

const safeInterleavings = fc.array(safeOpArb, { minLength: 1, maxLength: 80 });

describe("expiry policy safe, over interleavings with restarts, shutdowns and device fences", () => {
  it("after a lease ends (not by release), a safe write is owed or confirmed until a newer grant", () => {
    fc.assert(
      fc.property(safeInterleavings, (ops) => {
        const model = new SafeModel();
        run(ops, SAFE, (d, o, effects) => {
          model.observe(d, o, effects);
          if (model.owed(d)) expect(d.state.safeWrite, JSON.stringify(o)).not.toBeNull();
        });
      }),
      RUNS,
    );
  });

  it("once the device answers, the owed safe write lands: the device ends at the safe values", () => {
    fc.assert(
      fc.property(safeInterleavings, (ops) => {
        const model = new SafeModel();
        const { d } = run(ops, SAFE, (dd, o, effects) => model.observe(dd, o, effects));
        const owed = model.owed(d);
        // Settle: the link up, every write answered applied, time enough for any backoff.
        const settleFrom = d.log.length;
        d.feed({ type: "link", online: true });
        for (let i = 0; i < 40; i++) {
          const cmd = d.state.inFlight;
          if (cmd) d.feed({ type: "deviceResult", token: cmd.token, seq: cmd.seq, outcome: { kind: "applied", applied: cmd.set } });
          else d.advance(SAFE.limits.safeRetryMaxMs);
        }
        model.observe(d, { op: "advance", ms: 0 }, d.log.slice(settleFrom));
        if (!isLive(d.state.lease, d.nowMs)) expect(d.state.safeWrite).toBeNull();
        if (owed) expect(d.deviceWrites().at(-1)).toMatchObject({ holder: GATEWAY_HOLDER, set: { position: 0 } });
      }),
      RUNS,
    );
  });

  it("device writes carry strictly increasing (token, seq), safe attempts included, and tokens are never granted twice", () => {
    fc.assert(
      fc.property(safeInterleavings, (ops) => {
        const { d } = run(ops, SAFE);
        const w = writes(d.log);
        for (let i = 1; i < w.length; i++) {
          const [a, b] = [w[i - 1]!, w[i]!];
          expect(b.token > a.token || (b.token === a.token && b.seq > a.seq)).toBe(true);
        }
        const grants = d.log.flatMap((e) => (e.kind === "persist" && e.record.type === "granted" ? [e.record.token] : []));
        for (let i = 1; i < grants.length; i++) expect(grants[i]).toBeGreaterThan(grants[i - 1]!);
      }),
      RUNS,
    );
  });
});
