/** The core's part in a gateway group: takeover, stepping down, a grant the group could not confirm. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GATEWAY_HOLDER } from "../../../src/core/actuator.ts";
import type { ActuatorConfig, Effect } from "../../../src/core/types.ts";
import { CONFIG, CoreDriver, codeOf, replyTo, tokenOf } from "./harness.ts";

const persists = (effects: readonly Effect[]) =>
  effects.filter((e) => e.kind === "persist").map((e) => (e as Extract<Effect, { kind: "persist" }>).record);

describe("takeover", () => {
  it("takes a token of the gateway's own above the floor, durable before anything is shown", () => {
    const d = new CoreDriver();
    const effects = d.feed({ type: "takeover", floor: 41 });
    expect(effects[0]).toEqual({ kind: "persist", record: { type: "granted", holder: GATEWAY_HOLDER, token: 42 } });
    expect(effects).toContainEqual({ kind: "event", event: { type: "granted", holder: GATEWAY_HOLDER, token: 42 } });
    expect(d.state.highestGranted).toBe(42);
    expect(d.state.fence).toEqual({ token: 42, seq: null });
  });

  it("takes a token above its own journal when that is higher than the floor", () => {
    const d = new CoreDriver();
    tokenOf(d.acquire("A"));
    d.request({ type: "release", ref: d.ref(), holder: "A", token: 1 });
    tokenOf(d.acquire("B"));
    d.feed({ type: "takeover", floor: 0 });
    expect(d.state.highestGranted).toBe(3);
  });

  it("ends the lease it knew (uncertainty), and the next grant is one above the takeover token", () => {
    const d = new CoreDriver();
    const token = tokenOf(d.acquire("A"));
    const effects = d.feed({ type: "takeover", floor: 10 });
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token, code: "STALE_TOKEN" } });
    expect(d.state.lease).toBeNull();
    expect(codeOf(d.command("A", token, 1))).toBe("STALE_TOKEN");
    expect(tokenOf(d.acquire("B"))).toBe(12);
  });

  it("refuses what was queued under an older token instead of sending it", () => {
    const d = new CoreDriver();
    const token = tokenOf(d.acquire("A"));
    d.command("A", token, 1, { position: 10 }, null); // at the device, no result yet
    const queued = d.ref();
    d.feed({ type: "command", ref: queued, holder: "A", token, seq: 2, set: { position: 20 }, deadlineMs: 5000 });
    const effects = d.feed({ type: "takeover", floor: 0 });
    d.feed({ type: "deviceResult", token, seq: 1, outcome: { kind: "applied", applied: { position: 10 } } });
    expect(codeOf(replyTo(effects, queued) ?? replyTo(d.log, queued))).toBe("STALE_TOKEN");
    expect(d.deviceWrites().map((w) => w.seq)).toEqual([1]);
  });

  it("never goes back: over any sequence of floors and grants, every token is above every earlier one", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.record({ floor: fc.integer({ min: 0, max: 50 }) }), fc.constant("acquire" as const)), { maxLength: 30 }),
        (ops) => {
          const d = new CoreDriver();
          let highest = 0;
          for (const op of ops) {
            const before = d.log.length;
            if (op === "acquire") d.acquire(`h${highest}`);
            else d.feed({ type: "takeover", floor: op.floor });
            for (const r of persists(d.log.slice(before))) {
              if (r.type !== "granted") continue;
              expect(r.token).toBeGreaterThan(highest);
              if (op !== "acquire") expect(r.token).toBeGreaterThan(op.floor);
              highest = r.token;
            }
            d.nowMs += 2_000; // leases expire between steps
          }
        },
      ),
    );
  });
});

describe("stepping down", () => {
  it("ends the lease, refuses what is queued as not sent, and goes offline, writing nothing", () => {
    const d = new CoreDriver();
    const token = tokenOf(d.acquire("A"));
    d.command("A", token, 1, { position: 10 }, null);
    const queued = d.ref();
    d.feed({ type: "command", ref: queued, holder: "A", token, seq: 2, set: { position: 20 }, deadlineMs: 5000 });
    const effects = d.feed({ type: "stepDown" });
    expect(replyTo(effects, queued)).toMatchObject({ ok: false, error: { code: "DEVICE_UNAVAILABLE" } });
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token, code: "DEVICE_UNAVAILABLE" } });
    expect(persists(effects)).toEqual([]);
    expect(d.state).toMatchObject({ lease: null, queue: [], online: false });
    expect(d.deviceWrites()).toHaveLength(1); // the one already at the device, nothing more
  });

  it("does not drive to the safe value: the active gateway does that, not the one stepping down", () => {
    const config: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };
    const d = new CoreDriver(config);
    tokenOf(d.acquire("A"));
    const effects = d.feed({ type: "stepDown" });
    expect(effects.some((e) => e.kind === "deviceWrite" || e.kind === "persist")).toBe(false);
    d.nowMs += 10_000;
    expect(d.feed({ type: "tick" }).some((e) => e.kind === "deviceWrite" || e.kind === "persist")).toBe(false);
  });
});

describe("a grant the group could not confirm", () => {
  /** The effects of a step after its first persist: what the shell withholds when that grant fails. */
  const afterGrant = (effects: readonly Effect[]) => effects.slice(effects.findIndex((e) => e.kind === "persist") + 1);
  const failed = (token: number, withheld: readonly Effect[] = []) =>
    ({ type: "grantFailed", token, reason: "etcd did not answer", withheld }) as const;

  it("ends that lease, saying why", () => {
    const d = new CoreDriver();
    const token = tokenOf(d.acquire("A"));
    const effects = d.feed(failed(token));
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token, code: "GROUP_UNAVAILABLE" } });
    expect(d.state.lease).toBeNull();
    expect(codeOf(d.command("A", token, 1))).toBe("LEASE_EXPIRED");
    expect(tokenOf(d.acquire("A"))).toBe(token + 1); // the unconfirmed token is not handed out again
  });

  it("leaves another token's lease alone", () => {
    const d = new CoreDriver();
    const token = tokenOf(d.acquire("A"));
    expect(d.feed(failed(token - 1))).toEqual([]);
    expect(d.state.lease?.token).toBe(token);
  });

  it("answers the grant's withheld reply GROUP_UNAVAILABLE with the group's reason, and nothing of it as granted", () => {
    const d = new CoreDriver();
    const ref = d.ref();
    const grant = d.request({ type: "acquire", ref, holder: "A", ttlMs: 1_000 });
    const token = tokenOf(grant.reply);
    const effects = d.feed(failed(token, afterGrant(grant.effects)));
    expect(replyTo(effects, ref)).toEqual({
      ok: false,
      error: {
        code: "GROUP_UNAVAILABLE",
        message: "The gateway group could not confirm the grant (etcd did not answer); nothing was granted. Retry shortly.",
      },
    });
    expect(effects.some((e) => e.kind === "event" && e.event.type === "granted")).toBe(false);
  });

  it("passes a withheld refusal as it was: it claims nothing", () => {
    const d = new CoreDriver();
    const token = tokenOf(d.acquire("A"));
    const refusal = { kind: "reply", ref: 99, reply: { ok: false, error: { code: "LEASE_HELD", message: "held" } } } as const;
    expect(replyTo(d.feed(failed(token, [refusal])), 99)).toEqual(refusal.reply);
  });

  it("fails a withheld device write DEVICE_UNAVAILABLE, unsent, and owes the safe write again after its backoff", () => {
    const config: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };
    const d = new CoreDriver(config);
    tokenOf(d.acquire("A", 1_000));
    const expiry = d.advance(1_000); // the lease expires: the gateway grants itself a token and sends the safe values
    const safe = expiry.find((e) => e.kind === "deviceWrite");
    expect(safe).toBeDefined();
    const effects = d.feed(failed(d.state.highestGranted, afterGrant(expiry)));
    expect(d.state.inFlight).toBeNull();
    expect(effects).toContainEqual({
      kind: "audit",
      record: expect.objectContaining({
        type: "outcome",
        outcome: expect.objectContaining({ kind: "failed", code: "DEVICE_UNAVAILABLE" }),
      }),
    });
    expect(d.state.safeWrite?.notBeforeMs).toBeGreaterThan(d.nowMs);
  });

  /** The device writes among `effects`, each with the tokens granted (persisted) before it in the step. */
  const writesAfterGrants = (effects: readonly Effect[]) => {
    const granted: number[] = [];
    const writes: { token: number; seq: number; grantedBefore: number[] }[] = [];
    for (const e of effects) {
      if (e.kind === "persist" && e.record.type === "granted") granted.push(e.record.token);
      if (e.kind === "deviceWrite") writes.push({ token: e.token, seq: e.seq, grantedBefore: [...granted] });
    }
    return writes;
  };

  it("sends the owed safe write again only under a fresh token, granted before it, never under the one the group did not confirm", () => {
    const config: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };
    const d = new CoreDriver(config);
    tokenOf(d.acquire("A", 1_000));
    const expiry = d.advance(1_000);
    const unconfirmed = d.state.highestGranted;
    d.feed(failed(unconfirmed, afterGrant(expiry)));
    const retry = d.advance(config.limits.safeRetryMaxMs);
    expect(writesAfterGrants(retry)).toEqual([{ token: unconfirmed + 1, seq: 0, grantedBefore: [unconfirmed + 1] }]);
    // Confirmed this time: applied, nothing more is owed.
    d.feed({ type: "deviceResult", token: unconfirmed + 1, seq: 0, outcome: { kind: "applied", applied: { position: 0 } } });
    expect(d.state.safeWrite).toBeNull();
  });

  it("ends a lease granted in the same step after the grant that failed: a lease that expired into a safe write, then a new acquire", () => {
    const config: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };
    const d = new CoreDriver(config);
    tokenOf(d.acquire("A", 1_000));
    d.nowMs += 1_000; // A's lease has run out, unticked: B's acquire finds it so
    const ref = d.ref();
    const step = d.request({ type: "acquire", ref, holder: "B", ttlMs: 1_000 });
    const [safeToken, leaseToken] = persists(step.effects).map((r) => (r.type === "granted" ? r.token : 0));
    expect(tokenOf(step.reply)).toBe(leaseToken);
    const effects = d.feed(failed(safeToken!, afterGrant(step.effects)));
    expect(replyTo(effects, ref)).toMatchObject({ ok: false, error: { code: "GROUP_UNAVAILABLE" } });
    expect(effects).toContainEqual({
      kind: "event",
      event: { type: "expired", holder: "B", token: leaseToken, code: "GROUP_UNAVAILABLE" },
    });
    expect(d.state.lease).toBeNull();
    expect(codeOf(d.command("B", leaseToken!, 1))).toBe("LEASE_EXPIRED");
  });

  it("after a takeover the group did not confirm, owes its safe write under a fresh token: the takeover's second grant was withheld too", () => {
    const config: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };
    const d = new CoreDriver(config);
    const takeover = d.feed({ type: "takeover", floor: 5 });
    expect(persists(takeover).map((r) => r.type === "granted" && r.token)).toEqual([6, 7]); // the takeover's, then the safe write's
    d.feed(failed(6, afterGrant(takeover)));
    expect(d.state.safeWrite).toMatchObject({ token: 7, unconfirmed: true });
    const retry = d.advance(config.limits.safeRetryMaxMs);
    expect(writesAfterGrants(retry)).toEqual([{ token: 8, seq: 0, grantedBefore: [8] }]);
  });
});
