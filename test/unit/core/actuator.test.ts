import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { GATEWAY_HOLDER, initialState, nextWakeMs, step } from "../../../src/core/actuator.ts";
import type { ActuatorConfig, Effect } from "../../../src/core/types.ts";
import { CONFIG, CoreDriver, codeOf, replyTo, tokenOf } from "./harness.ts";

describe("lease transitions", () => {
  it("grants token 1 on an unheld actuator and raises the fence to it", () => {
    const d = new CoreDriver();
    const reply = d.acquire("A", 1_000);
    expect(reply).toEqual({ ok: true, lease: { holder: "A", token: 1, ttlMs: 1_000 } });
    expect(d.state.fence).toEqual({ token: 1, seq: null });
    expect(d.state.highestGranted).toBe(1);
  });

  it("persists the grant before replying", () => {
    const d = new CoreDriver();
    const effects = d.feed({ type: "acquire", ref: 7, holder: "A", ttlMs: 1_000 });
    const persistAt = effects.findIndex((e) => e.kind === "persist");
    const replyAt = effects.findIndex((e) => e.kind === "reply");
    expect(persistAt).toBeGreaterThanOrEqual(0);
    expect(persistAt).toBeLessThan(replyAt);
    expect(effects[persistAt]).toEqual({ kind: "persist", record: { type: "granted", holder: "A", token: 1 } });
  });

  it("refuses LEASE_HELD while another holder's lease is live, naming the holder", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.nowMs += 400;
    const reply = d.acquire("B", 1_000);
    expect(codeOf(reply)).toBe("LEASE_HELD");
    expect(reply).toMatchObject({ ok: false, error: { lease: { holder: "A", token: 1, expiresInMs: 600 } } });
    expect(d.state.highestGranted).toBe(1);
  });

  it("answers the live holder's repeated acquire with the same token (a retry after a lost reply)", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.nowMs += 900;
    // With the fence, so a restarted holder numbers its commands above the seqs it used.
    expect(d.acquire("A", 2_000)).toEqual({ ok: true, lease: { holder: "A", token: 1, ttlMs: 2_000 }, fence: { token: 1, seq: null } });
    d.nowMs += 1_500;
    expect(d.state.lease?.expiresAtMs).toBe(1_000 + 900 + 2_000);
  });

  it("grants a higher token after expiry", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.advance(1_000);
    expect(d.state.lease).toBeNull();
    expect(tokenOf(d.acquire("B"))).toBe(2);
  });

  it("treats the expiry instant as expired (a lease is live strictly before expiresAtMs)", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.nowMs += 999;
    expect(codeOf(d.acquire("B"))).toBe("LEASE_HELD");
    d.nowMs += 1;
    expect(tokenOf(d.acquire("B"))).toBe(2);
  });

  it("grants a higher token after release, even to the same holder", () => {
    const d = new CoreDriver();
    d.acquire("A");
    expect(d.request({ type: "release", ref: 1, holder: "A", token: 1 }).reply).toEqual({ ok: true, lease: null });
    expect(tokenOf(d.acquire("A"))).toBe(2);
  });

  it("renews before expiry keeping the token and pushing expiry out by the lease's ttl", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.nowMs += 800;
    expect(d.request({ type: "renew", ref: 1, holder: "A", token: 1 }).reply).toEqual({
      ok: true,
      lease: { holder: "A", token: 1, ttlMs: 1_000 },
    });
    expect(d.state.lease?.expiresAtMs).toBe(d.nowMs + 1_000);
    expect(d.state.highestGranted).toBe(1);
  });

  it("emits expired exactly once, when time passes expiry", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    const effects = [...d.advance(1_000), ...d.advance(1_000)];
    expect(effects.filter((e) => e.kind === "event" && e.event.type === "expired")).toHaveLength(1);
  });

  it.each([
    ["below the minimum", 99],
    ["above the maximum", 60_001],
    ["not an integer", 150.5],
  ])("refuses a ttlMs %s with INVALID_REQUEST and grants nothing", (_name, ttlMs) => {
    const d = new CoreDriver();
    expect(codeOf(d.acquire("A", ttlMs))).toBe("INVALID_REQUEST");
    expect(d.state.highestGranted).toBe(0);
    expect(d.log.some((e) => e.kind === "persist")).toBe(false);
  });
});

describe("renew and release refusals", () => {
  function held(): CoreDriver {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    return d;
  }
  const cases: [string, (d: CoreDriver) => void, string, number, string][] = [
    ["token never granted", () => {}, "A", 2, "UNKNOWN_TOKEN"],
    ["lease expired", (d) => d.advance(1_000), "A", 1, "LEASE_EXPIRED"],
    ["lease released", (d) => d.feed({ type: "release", ref: null, holder: "A", token: 1 }), "A", 1, "LEASE_EXPIRED"],
    ["another holder's token", () => {}, "B", 1, "NOT_HOLDER"],
    [
      "token below the fence",
      (d) => {
        d.advance(1_000);
        d.acquire("B");
      },
      "A",
      1,
      "STALE_TOKEN",
    ],
  ];
  for (const verb of ["renew", "release"] as const) {
    it.each(cases)(`${verb}: %s`, (_name, setup, holder, token, code) => {
      const d = held();
      setup(d);
      const before = d.state;
      const { reply, effects } = d.request({ type: verb, ref: 99, holder, token });
      expect(codeOf(reply)).toBe(code);
      expect(d.state.lease).toEqual(before.lease);
      expect(effects.some((e) => e.kind === "persist")).toBe(false);
    });
  }
});

describe("command acceptance", () => {
  function held(): CoreDriver {
    const d = new CoreDriver();
    d.acquire("A", 10_000);
    return d;
  }

  it("accepts the holder's first command with any seq: the intent goes to the audit trail, nothing waits for the disk", () => {
    const d = held();
    const effects = d.feed({ type: "command", ref: 5, holder: "A", token: 1, seq: 42, set: { position: 10 }, deadlineMs: 1_000 });
    const kinds = effects.map((e) => e.kind);
    expect(kinds).not.toContain("persist");
    expect(kinds.indexOf("audit")).toBeLessThan(kinds.indexOf("deviceWrite"));
    expect(effects.find((e) => e.kind === "audit")).toEqual({
      kind: "audit",
      record: { type: "intent", holder: "A", token: 1, seq: 42, set: { position: 10 } },
    });
    expect(d.state.fence).toEqual({ token: 1, seq: 42 });
    expect(replyTo(effects, 5)).toBeUndefined(); // nothing is claimed before the device answers
  });

  it("replies applied with the outcome handed to the audit trail first, and no persist", () => {
    const d = held();
    d.feed({ type: "command", ref: 5, holder: "A", token: 1, seq: 1, set: { position: 10 }, deadlineMs: 1_000 });
    const effects = d.feed({ type: "deviceResult", token: 1, seq: 1, outcome: { kind: "applied", applied: { position: 10 } } });
    const kinds = effects.map((e) => e.kind);
    expect(kinds).not.toContain("persist");
    expect(kinds.indexOf("audit")).toBeLessThan(kinds.indexOf("reply"));
    expect(replyTo(effects, 5)).toEqual({ ok: true, outcome: "applied", token: 1, seq: 1, applied: { position: 10 } });
  });

  it("a command whose audit records a crash lost gets LEASE_EXPIRED on retry after the restart, not DUPLICATE", () => {
    const d = held();
    expect(d.command("A", 1, 7)).toMatchObject({ ok: true, outcome: "applied" });
    d.restart(true, 0); // the intent and outcome were still on their way to the disk
    const { reply } = d.request({ type: "command", ref: d.ref(), holder: "A", token: 1, seq: 7, set: { position: 50 }, deadlineMs: 1_000 });
    expect(codeOf(reply)).toBe("LEASE_EXPIRED");
    expect(d.deviceWrites()).toHaveLength(1);
  });

  it("with policy safe, the same retry gets STALE_TOKEN: the restart's safe write took a newer token", () => {
    const d = new CoreDriver({ ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } });
    d.acquire("A", 10_000);
    expect(d.command("A", 1, 7)).toMatchObject({ ok: true, outcome: "applied" });
    d.restart(true, 0);
    const { reply } = d.request({ type: "command", ref: d.ref(), holder: "A", token: 1, seq: 7, set: { position: 50 }, deadlineMs: 1_000 });
    expect(codeOf(reply)).toBe("STALE_TOKEN");
    expect(d.deviceWrites().filter((w) => w.holder === "A")).toHaveLength(1);
  });

  const refusals: [string, (d: CoreDriver) => { holder: string; token: number; seq: number; set?: Record<string, number> }, string][] = [
    ["UNKNOWN_POINT", () => ({ holder: "A", token: 1, seq: 1, set: { flow: 1 } }), "UNKNOWN_POINT"],
    ["READ_ONLY_POINT", () => ({ holder: "A", token: 1, seq: 1, set: { actual: 1 } }), "READ_ONLY_POINT"],
    ["OUT_OF_RANGE above max", () => ({ holder: "A", token: 1, seq: 1, set: { position: 100.5 } }), "OUT_OF_RANGE"],
    ["OUT_OF_RANGE below min", () => ({ holder: "A", token: 1, seq: 1, set: { speed: 0 } }), "OUT_OF_RANGE"],
    ["OUT_OF_RANGE NaN", () => ({ holder: "A", token: 1, seq: 1, set: { position: Number.NaN } }), "OUT_OF_RANGE"],
    ["UNKNOWN_TOKEN", () => ({ holder: "A", token: 2, seq: 1 }), "UNKNOWN_TOKEN"],
    [
      "STALE_TOKEN",
      (d) => {
        d.advance(10_000);
        d.acquire("B");
        return { holder: "A", token: 1, seq: 5 };
      },
      "STALE_TOKEN",
    ],
    [
      "LEASE_EXPIRED",
      (d) => {
        d.advance(10_000);
        return { holder: "A", token: 1, seq: 1 };
      },
      "LEASE_EXPIRED",
    ],
    ["NOT_HOLDER", () => ({ holder: "B", token: 1, seq: 1 }), "NOT_HOLDER"],
    [
      "NOT_HOLDER before STALE_SEQ",
      (d) => {
        d.command("A", 1, 5);
        return { holder: "B", token: 1, seq: 5 };
      },
      "NOT_HOLDER",
    ],
    [
      "STALE_SEQ equal, once the original left the duplicate record",
      (d) => {
        for (let seq = 1; seq <= 9; seq++) d.command("A", 1, seq); // recentLimit is 8: seq 1 is forgotten
        return { holder: "A", token: 1, seq: 1 };
      },
      "STALE_SEQ",
    ],
    [
      "STALE_SEQ lower",
      (d) => {
        d.command("A", 1, 5);
        return { holder: "A", token: 1, seq: 4 };
      },
      "STALE_SEQ",
    ],
    [
      "DUPLICATE",
      (d) => {
        d.command("A", 1, 5);
        return { holder: "A", token: 1, seq: 5 };
      },
      "DUPLICATE",
    ],
    [
      "OVERLOADED",
      (d) => {
        d.feed({ type: "command", ref: null, holder: "A", token: 1, seq: 1, set: { position: 1 }, deadlineMs: 5_000 }); // in flight
        for (let seq = 2; seq <= 5; seq++)
          d.feed({ type: "command", ref: null, holder: "A", token: 1, seq, set: { position: 1 }, deadlineMs: 5_000 });
        return { holder: "A", token: 1, seq: 6 };
      },
      "OVERLOADED",
    ],
    [
      "DEVICE_UNAVAILABLE",
      (d) => {
        d.feed({ type: "link", online: false });
        return { holder: "A", token: 1, seq: 1 };
      },
      "DEVICE_UNAVAILABLE",
    ],
  ];
  it.each(refusals)("refuses %s and changes nothing durable", (_name, setup, code) => {
    const d = held();
    const cmd = setup(d);
    const fenceBefore = d.state.fence;
    const writesBefore = d.deviceWrites().length;
    const { reply, effects } = d.request({ type: "command", ref: 99, deadlineMs: 5_000, set: { position: 50 }, ...cmd });
    expect(codeOf(reply)).toBe(code);
    expect(d.state.fence).toEqual(fenceBefore);
    expect(d.deviceWrites()).toHaveLength(writesBefore);
    expect(effects.some((e) => e.kind === "persist")).toBe(false);
    expect(effects).toContainEqual({ kind: "event", event: expect.objectContaining({ type: "rejected", code }) });
  });

  it("carries the fence and the live lease on a fence refusal", () => {
    const d = held();
    d.command("A", 1, 3);
    const reply = d.command("B", 1, 4);
    expect(reply).toMatchObject({
      ok: false,
      error: { code: "NOT_HOLDER", fence: { token: 1, seq: 3 }, lease: { holder: "A", token: 1 } },
    });
  });

  it("answers DUPLICATE with the original applied outcome, without a second device write", () => {
    const d = held();
    d.command("A", 1, 5, { position: 30 });
    const reply = d.command("A", 1, 5, { position: 30 });
    expect(reply).toMatchObject({
      ok: false,
      error: { code: "DUPLICATE", original: { ok: true, outcome: "applied", token: 1, seq: 5, applied: { position: 30 } } },
    });
    expect(d.deviceWrites()).toHaveLength(1);
  });

  it("answers DUPLICATE even after the lease expired (a retry is always safe to answer)", () => {
    const d = held();
    d.command("A", 1, 5);
    d.advance(10_000);
    d.acquire("B");
    expect(codeOf(d.command("A", 1, 5))).toBe("DUPLICATE");
  });

  it("answers a retry that arrives while the original is at the device once the original completes", () => {
    const d = held();
    d.feed({ type: "command", ref: 1, holder: "A", token: 1, seq: 1, set: { position: 5 }, deadlineMs: 5_000 });
    const retry = d.feed({ type: "command", ref: 2, holder: "A", token: 1, seq: 1, set: { position: 5 }, deadlineMs: 5_000 });
    expect(replyTo(retry, 2)).toBeUndefined();
    const done = d.feed({ type: "deviceResult", token: 1, seq: 1, outcome: { kind: "applied", applied: { position: 5 } } });
    expect(codeOf(replyTo(done, 1))).toBe("OK");
    expect(codeOf(replyTo(done, 2))).toBe("DUPLICATE");
    expect(d.deviceWrites()).toHaveLength(1);
  });

  it("re-checks at dequeue: a queued stale command is refused once a newer lease exists", () => {
    const d = held();
    d.feed({ type: "command", ref: 1, holder: "A", token: 1, seq: 1, set: { position: 5 }, deadlineMs: 60_000 });
    d.feed({ type: "command", ref: 2, holder: "A", token: 1, seq: 2, set: { position: 6 }, deadlineMs: 60_000 }); // queued
    d.nowMs += 10_000; // A's lease expires while seq 1 is at the device
    d.acquire("B");
    const done = d.feed({ type: "deviceResult", token: 1, seq: 1, outcome: { kind: "applied", applied: { position: 5 } } });
    expect(codeOf(replyTo(done, 2))).toBe("STALE_TOKEN");
    expect(d.deviceWrites()).toHaveLength(1);
  });

  it("drops a queued command at its deadline without touching the device", () => {
    const d = held();
    d.feed({ type: "command", ref: 1, holder: "A", token: 1, seq: 1, set: { position: 5 }, deadlineMs: 5_000 });
    d.feed({ type: "command", ref: 2, holder: "A", token: 1, seq: 2, set: { position: 6 }, deadlineMs: 100 });
    const effects = d.advance(100);
    expect(codeOf(replyTo(effects, 2))).toBe("DEADLINE_EXCEEDED");
    expect(d.deviceWrites()).toHaveLength(1);
  });

  it.each([
    ["OUTCOME_UNKNOWN", "outcome-unknown"],
    ["DEVICE_REJECTED", "rejected"],
    ["DEVICE_ERROR", "rejected"],
    ["DEVICE_UNAVAILABLE", "rejected"],
  ] as const)("reports a device %s with the fence kept raised", (code, eventType) => {
    const d = held();
    const outcome = { kind: "failed" as const, code, message: "x", ...(code === "DEVICE_ERROR" ? { modbusCode: 4 } : {}) };
    const reply = d.command("A", 1, 7, { position: 1 }, outcome);
    expect(reply).toMatchObject({ ok: false, error: { code, fence: { token: 1, seq: 7 } } });
    if (code === "DEVICE_ERROR") expect(reply).toMatchObject({ error: { modbusCode: 4 } });
    expect(d.state.fence).toEqual({ token: 1, seq: 7 });
    expect(d.log).toContainEqual({ kind: "event", event: { type: eventType, holder: "A", token: 1, seq: 7, code } });
  });

  it("fails queued commands with DEVICE_UNAVAILABLE when the link drops", () => {
    const d = held();
    d.feed({ type: "command", ref: 1, holder: "A", token: 1, seq: 1, set: { position: 5 }, deadlineMs: 5_000 });
    d.feed({ type: "command", ref: 2, holder: "A", token: 1, seq: 2, set: { position: 6 }, deadlineMs: 5_000 });
    const effects = d.feed({ type: "link", online: false });
    expect(codeOf(replyTo(effects, 2))).toBe("DEVICE_UNAVAILABLE");
    expect(d.state.queue).toHaveLength(0);
  });

  it("ignores a device result that is not for the command in flight", () => {
    const d = held();
    const before = d.state;
    expect(d.feed({ type: "deviceResult", token: 1, seq: 9, outcome: { kind: "applied", applied: {} } })).toEqual([]);
    expect(d.state).toBe(before);
  });
});

describe("refusal order is the contract's", () => {
  it("reports a point error before a token error", () => {
    const d = new CoreDriver();
    d.acquire("A");
    expect(codeOf(d.command("A", 9, 1, { nope: 1 }))).toBe("UNKNOWN_POINT");
  });
  it("reports UNKNOWN_TOKEN before NOT_HOLDER", () => {
    const d = new CoreDriver();
    d.acquire("A");
    expect(codeOf(d.command("B", 2, 1))).toBe("UNKNOWN_TOKEN");
  });
  it("reports DUPLICATE before STALE_TOKEN", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.command("A", 1, 1);
    d.advance(1_000);
    d.acquire("B");
    expect(codeOf(d.command("A", 1, 1))).toBe("DUPLICATE");
    expect(codeOf(d.command("A", 1, 2))).toBe("STALE_TOKEN");
  });
  it("reports LEASE_EXPIRED before NOT_HOLDER", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    d.advance(1_000);
    expect(codeOf(d.command("B", 1, 1))).toBe("LEASE_EXPIRED");
  });
  it("reports a fence refusal before DEVICE_UNAVAILABLE", () => {
    const d = new CoreDriver(CONFIG, false);
    d.acquire("A");
    expect(codeOf(d.command("B", 1, 1))).toBe("NOT_HOLDER");
    expect(codeOf(d.command("A", 1, 1))).toBe("DEVICE_UNAVAILABLE");
  });
});

const SAFE: ActuatorConfig = { ...CONFIG, expiryPolicy: { kind: "safe", set: { position: 0 } } };
const gatewayWrites = (d: CoreDriver) => d.deviceWrites().filter((w) => w.holder === GATEWAY_HOLDER);

describe("expiry policy 'safe'", () => {
  it("takes a gateway token that raises the fence, and writes the safe value", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 1_000);
    d.command("A", 1, 1, { position: 80 });
    const effects = d.advance(1_000);
    expect(effects).toContainEqual({ kind: "persist", record: { type: "granted", holder: GATEWAY_HOLDER, token: 2 } });
    expect(effects).toContainEqual({ kind: "deviceWrite", holder: GATEWAY_HOLDER, token: 2, seq: 0, set: { position: 0 } });
    expect(d.state.fence).toEqual({ token: 2, seq: 0 });
    expect(codeOf(d.command("A", 1, 2))).toBe("STALE_TOKEN");
  });

  it("drops the safe write if a new lease was granted before it left the queue", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 1_000);
    d.feed({ type: "command", ref: 1, holder: "A", token: 1, seq: 1, set: { position: 80 }, deadlineMs: 60_000 }); // at the device
    d.advance(1_000); // expiry queues the safe write behind the in-flight command
    expect(tokenOf(d.acquire("B"))).toBe(3);
    d.feed({ type: "deviceResult", token: 1, seq: 1, outcome: { kind: "applied", applied: { position: 80 } } });
    expect(d.deviceWrites().map((w) => w.holder)).toEqual(["A"]);
    expect(d.state.fence).toEqual({ token: 3, seq: null });
  });

  const UNKNOWN = { kind: "failed", code: "OUTCOME_UNKNOWN", message: "timeout" } as const;
  /** A at 80 under token 1, then its lease (1 s) runs out: the safe write is owed under token 2. */
  function expiredAt80(online = true): CoreDriver {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 1_000);
    d.command("A", 1, 1, { position: 80 });
    if (!online) d.feed({ type: "link", online: false });
    d.advance(1_000);
    return d;
  }

  it("retries a failed safe write with backoff (minMs, doubling to maxMs) until the device confirms it", () => {
    const d = expiredAt80();
    const delays: number[] = [];
    for (let attempt = 0; attempt < 6; attempt++) {
      const write = d.state.inFlight!;
      expect(write).toMatchObject({ holder: GATEWAY_HOLDER, token: 2, seq: attempt, set: { position: 0 } });
      d.feed({ type: "deviceResult", token: 2, seq: attempt, outcome: UNKNOWN });
      expect(d.state.safeWrite).toMatchObject({ token: 2, attempts: attempt + 1 });
      const wake = nextWakeMs(d.state)!;
      delays.push(wake - d.nowMs);
      expect(d.advance(wake - d.nowMs - 1).some((e) => e.kind === "deviceWrite")).toBe(false); // not a moment early
      d.advance(1);
    }
    expect(delays).toEqual([100, 200, 400, 800, 1_600, 1_600]);
    d.feed({ type: "deviceResult", token: 2, seq: 6, outcome: { kind: "applied", applied: { position: 0 } } });
    expect(d.state.safeWrite).toBeNull();
    expect(nextWakeMs(d.state)).toBeNull();
    expect(gatewayWrites(d)).toHaveLength(7);
    expect(d.state.fence).toEqual({ token: 2, seq: 6 });
  });

  it("keeps the safe write owed while the link is down, without waking, and sends it when the link is back", () => {
    const d = expiredAt80(false);
    expect(d.state.safeWrite).toMatchObject({ token: 2, attempts: 0 });
    expect(nextWakeMs(d.state)).toBeNull(); // nothing can be sent: no busy ticking
    d.advance(60_000);
    expect(gatewayWrites(d)).toHaveLength(0);
    expect(d.state.safeWrite).not.toBeNull();
    d.feed({ type: "link", online: true });
    expect(gatewayWrites(d)).toEqual([{ kind: "deviceWrite", holder: GATEWAY_HOLDER, token: 2, seq: 0, set: { position: 0 } }]);
  });

  it("keeps it owed when the link drops with an attempt at the device, and tries again when it is back", () => {
    const d = expiredAt80();
    d.feed({ type: "link", online: false });
    d.feed({ type: "deviceResult", token: 2, seq: 0, outcome: { kind: "failed", code: "DEVICE_UNAVAILABLE", message: "down" } });
    d.advance(5_000);
    d.feed({ type: "link", online: true });
    expect(gatewayWrites(d).map((w) => [w.token, w.seq])).toEqual([
      [2, 0],
      [2, 1],
    ]);
  });

  it("is superseded by a newer grant: no attempt after it, the new holder's commands go through", () => {
    const d = expiredAt80();
    d.feed({ type: "deviceResult", token: 2, seq: 0, outcome: UNKNOWN });
    const token = tokenOf(d.acquire("B"));
    expect(token).toBe(3);
    expect(d.state.safeWrite).toBeNull();
    d.advance(500);
    expect(gatewayWrites(d)).toHaveLength(1);
    expect(codeOf(d.command("B", 3, 0, { position: 30 }))).toBe("OK");
  });

  it("refuses the ended lease's queued commands while the safe write is owed", () => {
    const d = expiredAt80(false);
    d.feed({ type: "link", online: true });
    expect(codeOf(d.command("A", 1, 2, { position: 90 }))).toBe("STALE_TOKEN");
  });

  it("when the device's own fence is ahead, ends the lease and owes the safe write above the device's token", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 10_000);
    d.command("A", 1, 0, { position: 80 });
    const effects = d.feed({ type: "deviceFence", token: 9, seq: null });
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token: 1, code: "STALE_TOKEN" } });
    expect(effects).toContainEqual({ kind: "persist", record: { type: "granted", holder: GATEWAY_HOLDER, token: 10 } });
    expect(gatewayWrites(d)).toEqual([{ kind: "deviceWrite", holder: GATEWAY_HOLDER, token: 10, seq: 0, set: { position: 0 } }]);
  });

  it("when the device refuses an attempt because its fence moved ahead, owes it again above the device's token", () => {
    const d = expiredAt80();
    // The shell reads the device's fence before it hands over the refusal.
    d.feed({ type: "deviceFence", token: 7, seq: null });
    d.feed({
      type: "deviceResult",
      token: 2,
      seq: 0,
      outcome: { kind: "failed", code: "DEVICE_REJECTED", message: "fence", modbusCode: 0x46 },
    });
    expect(d.state.safeWrite).toMatchObject({ token: 8, seq: 0 });
    d.advance(nextWakeMs(d.state)! - d.nowMs);
    expect(gatewayWrites(d).at(-1)).toEqual({ kind: "deviceWrite", holder: GATEWAY_HOLDER, token: 8, seq: 0, set: { position: 0 } });
  });

  it("on shutdown ends the live lease and owes the safe write", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 10_000);
    d.command("A", 1, 0, { position: 80 });
    const effects = d.feed({ type: "shutdown" });
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token: 1, reason: "shutdown" } });
    expect(gatewayWrites(d)).toHaveLength(1);
  });
});

describe("restart", () => {
  it("ends the newest lease with an expired event and owes the safe write, sent once the link is up", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 60_000);
    d.command("A", 1, 0, { position: 60 });
    const effects = d.restart(false);
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token: 1, reason: "restart" } });
    expect(effects).toContainEqual({ kind: "persist", record: { type: "granted", holder: GATEWAY_HOLDER, token: 2 } });
    expect(d.state.safeWrite).toMatchObject({ token: 2 });
    d.feed({ type: "link", online: true });
    expect(gatewayWrites(d)).toEqual([{ kind: "deviceWrite", holder: GATEWAY_HOLDER, token: 2, seq: 0, set: { position: 0 } }]);
  });

  it("owes it after a grant with no command too: the device may still hold an earlier holder's value", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 60_000);
    d.restart();
    expect(gatewayWrites(d)).toHaveLength(1);
  });

  it("owes nothing when the journal shows the device confirmed the safe values under the newest token", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 1_000);
    d.command("A", 1, 0, { position: 60 });
    d.advance(1_000);
    d.feed({ type: "deviceResult", token: 2, seq: 0, outcome: { kind: "applied", applied: { position: 0 } } });
    const effects = d.restart();
    expect(effects.filter((e) => e.kind !== "stateChanged")).toEqual([]);
    expect(gatewayWrites(d)).toHaveLength(1);
  });

  it("owes it again, under a new token, when the gateway's write was not confirmed before the restart", () => {
    const d = new CoreDriver(SAFE);
    d.acquire("A", 1_000);
    d.advance(1_000); // the safe write (token 2) is at the device when the gateway dies
    d.restart();
    expect(gatewayWrites(d).map((w) => w.token)).toEqual([2, 3]);
  });

  it("owes nothing when no token was ever granted", () => {
    const d = new CoreDriver(SAFE);
    expect(d.restart(false)).toEqual([]);
    expect(d.state.safeWrite).toBeNull();
  });

  it("with policy hold: reports the ended lease, writes nothing", () => {
    const d = new CoreDriver();
    d.acquire("A", 60_000);
    d.command("A", 1, 0, { position: 60 });
    const effects = d.restart();
    expect(effects).toContainEqual({ kind: "event", event: { type: "expired", holder: "A", token: 1, reason: "restart" } });
    expect(effects.some((e) => e.kind === "persist" || e.kind === "deviceWrite")).toBe(false);
    expect(tokenOf(d.acquire("B"))).toBe(2);
  });
});

describe("device fence observed at start", () => {
  it("moves highestGranted and the fence up to a device that is ahead, durably", () => {
    const d = new CoreDriver();
    const effects = d.feed({ type: "deviceFence", token: 41, seq: 7 });
    expect(effects).toContainEqual({ kind: "persist", record: { type: "fenceObserved", token: 41, seq: 7 } });
    expect(tokenOf(d.acquire("A"))).toBe(42);
  });

  it("changes nothing when the device is behind", () => {
    const d = new CoreDriver();
    d.acquire("A");
    d.command("A", 1, 9);
    expect(d.feed({ type: "deviceFence", token: 1, seq: 3 })).toEqual([]);
    expect(d.state.fence).toEqual({ token: 1, seq: 9 });
  });

  it("ends a live lease whose token the device has already passed", () => {
    const d = new CoreDriver();
    d.acquire("A");
    d.feed({ type: "deviceFence", token: 5, seq: 0 });
    expect(d.state.lease).toBeNull();
    expect(codeOf(d.command("A", 1, 1))).toBe("STALE_TOKEN");
  });
});

describe("the seed scenario: a paused holder's command after a takeover", () => {
  it("refuses A's stale command every time, whatever the pause length", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 120_000 }),
        fc.integer({ min: 100, max: 60_000 }),
        fc.integer({ min: 0, max: 1_000 }),
        (extraPauseMs, ttlMs, seqA) => {
          const d = new CoreDriver();
          const n = tokenOf(d.acquire("A", ttlMs));
          d.advance(ttlMs + extraPauseMs); // A pauses past expiry
          const m = tokenOf(d.acquire("B", ttlMs));
          expect(m).toBe(n + 1);
          expect(codeOf(d.command("B", m, 0, { position: 20 }))).toBe("OK");
          expect(codeOf(d.command("A", n, seqA, { position: 90 }))).toBe("STALE_TOKEN");
          expect(d.deviceWrites().map((w) => w.holder)).toEqual(["B"]);
          expect(d.state.fence).toEqual({ token: m, seq: 0 });
        },
      ),
      { numRuns: 1_000 },
    );
  });
});

describe("purity", () => {
  it("returns the same result for the same state and input, and never mutates its input", () => {
    const state = Object.freeze(initialState({ highestGranted: 3, lastGrantHolder: "A", fence: { token: 3, seq: 1 }, recent: [] }));
    const input = { type: "acquire", nowMs: 5, ref: 1, holder: "A", ttlMs: 500 } as const;
    const a = step(CONFIG, state, input);
    const b = step(CONFIG, state, input);
    expect(a).toEqual(b);
    expect(state.highestGranted).toBe(3);
  });

  it("has no persist effect for a decision that changes nothing durable", () => {
    const d = new CoreDriver();
    d.acquire("A");
    const effects: Effect[] = d.feed({ type: "renew", ref: 1, holder: "A", token: 1 });
    expect(effects.some((e) => e.kind === "persist")).toBe(false);
  });
});
