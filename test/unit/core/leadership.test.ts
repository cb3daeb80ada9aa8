/**
 * The gateway group's leadership machine, one scenario per test, on fake time: what a
 * gateway asks etcd, when it becomes active, and when it stops driving devices.
 */
import { describe, expect, it } from "vitest";
import {
  INITIAL_LEADERSHIP,
  etcdOutOfReach,
  leadershipConfig,
  leadershipStep,
  leadershipWakeMs,
  mayDriveDevices,
  mayGrant,
  type LeadershipEffect,
  type LeadershipEvent,
  type LeadershipState,
} from "../../../src/core/leadership.ts";

const CONFIG = leadershipConfig(6000, 1000); // renew every 2000, retry and look every 250

class Member {
  state: LeadershipState = INITIAL_LEADERSHIP;
  nowMs = 1000;
  feed(input: LeadershipEvent): LeadershipEffect[] {
    const { state, effects } = leadershipStep(CONFIG, this.state, { ...input, nowMs: this.nowMs });
    this.state = state;
    return [...effects];
  }
  get drives(): boolean {
    return mayDriveDevices(CONFIG, this.state, this.nowMs);
  }
  /** start → granted at the same moment → leader key free → campaign won (term 7). */
  activate(): void {
    this.feed({ type: "start" });
    this.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: this.nowMs });
    this.feed({ type: "looked", leaseId: "L1", leader: "none" });
    this.feed({ type: "campaigned", won: { revision: 7 } });
  }
}

const kinds = (effects: readonly LeadershipEffect[]) => effects.map((e) => e.kind);

describe("becoming active", () => {
  it("asks for a lease at start, looks at the leader key once it has one, campaigns when it is free, activates on winning", () => {
    const m = new Member();
    expect(m.feed({ type: "start" })).toEqual([{ kind: "grant", ttlMs: 6000 }]);
    expect(m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 })).toEqual([{ kind: "look", leaseId: "L1" }]);
    expect(m.state.phase).toBe("standby");
    expect(m.feed({ type: "looked", leaseId: "L1", leader: "none" })).toEqual([{ kind: "campaign", leaseId: "L1" }]);
    expect(m.drives).toBe(false);
    expect(m.feed({ type: "campaigned", won: { revision: 7 } })).toEqual([{ kind: "activate", term: { revision: 7 } }]);
    expect(m.state.phase).toBe("active");
    expect(m.drives).toBe(true);
  });

  it("stays standby while another gateway holds the key, and looks again every lookEveryMs", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    expect(m.feed({ type: "looked", leaseId: "L1", leader: "other" })).toEqual([]);
    expect(leadershipWakeMs(CONFIG, m.state)).toBe(1000 + CONFIG.lookEveryMs);
    m.nowMs += CONFIG.lookEveryMs;
    expect(m.feed({ type: "tick" })).toEqual([{ kind: "look", leaseId: "L1" }]);
    expect(m.drives).toBe(false);
  });

  it("stays standby after losing the campaign (the other gateway's transaction came first)", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    m.feed({ type: "looked", leaseId: "L1", leader: "none" });
    expect(m.feed({ type: "campaigned", won: null })).toEqual([]);
    expect(m.state.phase).toBe("standby");
    expect(m.drives).toBe(false);
  });

  it("activates when a look finds the key is its own: a campaign whose answer was lost had won", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    m.feed({ type: "looked", leaseId: "L1", leader: "none" });
    expect(m.feed({ type: "campaignFailed" })).toEqual([{ kind: "look", leaseId: "L1" }]);
    expect(m.feed({ type: "looked", leaseId: "L1", leader: { mine: { revision: 9 } } })).toEqual([
      { kind: "activate", term: { revision: 9 } },
    ]);
  });

  it("uses the lower of the asked and the granted TTL", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 60_000, sentAtMs: 1000 });
    expect(m.state.lease?.validUntilMs).toBe(1000 + 6000);
  });

  it("does not campaign with a lease whose window is closing, and gives it up", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    m.nowMs = 1000 + 6000 - 1000; // at validUntil - margin
    const effects = m.feed({ type: "looked", leaseId: "L1", leader: "none" });
    expect(kinds(effects)).not.toContain("campaign");
  });

  it("revokes a campaign it won too late to serve (a paused process), and asks for a new lease", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    m.feed({ type: "looked", leaseId: "L1", leader: "none" });
    m.nowMs = 1000 + 5500;
    expect(m.feed({ type: "campaigned", won: { revision: 3 } })).toEqual([
      { kind: "revoke", id: "L1" },
      { kind: "grant", ttlMs: 6000 },
    ]);
    expect(m.drives).toBe(false);
  });
});

describe("self-fencing", () => {
  it("drives devices until the last confirmed renewal's send time + TTL - margin, not a millisecond more", () => {
    const m = new Member();
    m.activate(); // granted at 1000: valid until 7000, drives until 6000
    m.nowMs = 5999;
    expect(m.drives).toBe(true);
    m.nowMs = 6000;
    expect(m.drives).toBe(false);
  });

  it("steps down at the deadline when renewals fail: deactivate first, then revoke, then a new lease", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    expect(m.feed({ type: "tick" })).toEqual([
      { kind: "renew", id: "L1" },
      { kind: "look", leaseId: "L1" },
    ]);
    m.nowMs = 3400;
    m.feed({ type: "renewFailed", id: "L1" });
    m.feed({ type: "lookFailed" });
    expect(m.state.etcdReachable).toBe(false);
    expect(mayGrant(CONFIG, m.state, m.nowMs)).toBe(false); // no grants while etcd does not answer
    expect(m.drives).toBe(true); // but commands under live leases go on
    expect(leadershipWakeMs(CONFIG, m.state)).toBe(3400 + CONFIG.retryMs);
    m.nowMs = 6000;
    const effects = m.feed({ type: "tick" });
    expect(effects[0]).toMatchObject({ kind: "deactivate", reason: "renewal-overdue" });
    expect(effects[1]).toEqual({ kind: "revoke", id: "L1" });
    expect(effects[2]).toEqual({ kind: "grant", ttlMs: 6000 });
    expect(m.state.phase).toBe("idle");
  });

  it("wakes up exactly at the deadline while active", () => {
    const m = new Member();
    m.activate();
    m.feed({ type: "tick" }); // nothing due yet
    m.nowMs = 2999;
    expect(leadershipWakeMs(CONFIG, m.state)).toBe(3000); // the renewal comes first
    m.nowMs = 3000;
    m.feed({ type: "tick" }); // renew and look in flight; their answers never come
    expect(leadershipWakeMs(CONFIG, m.state)).toBe(6000);
  });

  it("extends the window from the renewal's send time, not from when its answer arrived", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" });
    m.nowMs = 5900; // a slow answer
    m.feed({ type: "renewed", id: "L1", ttlMs: 6000, sentAtMs: 3000 });
    expect(m.state.lease?.validUntilMs).toBe(9000);
    m.nowMs = 7999;
    expect(m.drives).toBe(true);
    m.nowMs = 8000;
    expect(m.drives).toBe(false);
  });

  it("never shortens the window on an older renewal's late answer", () => {
    const m = new Member();
    m.activate();
    m.feed({ type: "renewed", id: "L1", ttlMs: 6000, sentAtMs: 4000 });
    m.feed({ type: "renewed", id: "L1", ttlMs: 6000, sentAtMs: 2000 });
    expect(m.state.lease?.validUntilMs).toBe(10_000);
  });

  it("a process paused past its window steps down before it does anything with the answers that waited", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 60_000; // SIGCONT
    const effects = m.feed({ type: "renewed", id: "L1", ttlMs: 6000, sentAtMs: 59_000 });
    expect(effects[0]).toMatchObject({ kind: "deactivate", reason: "renewal-overdue" });
    expect(m.drives).toBe(false);
    expect(m.state.lease).toBeNull(); // the late renewal does not revive the given-up lease
  });

  it("steps down at once when etcd no longer knows the lease", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" });
    const effects = m.feed({ type: "renewed", id: "L1", ttlMs: 0, sentAtMs: 3000 });
    expect(effects[0]).toMatchObject({ kind: "deactivate", reason: "lease-lost" });
    expect(m.drives).toBe(false);
  });

  it("steps down when its periodic look finds the leader key gone or another's", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" });
    expect(m.feed({ type: "looked", leaseId: "L1", leader: "other" })[0]).toMatchObject({ kind: "deactivate", reason: "deposed" });
  });

  it("keeps serving while its look finds its own term", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" });
    expect(m.feed({ type: "looked", leaseId: "L1", leader: { mine: { revision: 7 } } })).toEqual([]);
    expect(m.drives).toBe(true);
  });

  it("steps down when a device or etcd shows it is stale", () => {
    const m = new Member();
    m.activate();
    const effects = m.feed({ type: "stale", reason: "device refused token 4 (0x46)" });
    expect(effects[0]).toEqual({ kind: "deactivate", reason: "stale", detail: "device refused token 4 (0x46)" });
    expect(kinds(effects)).toEqual(["deactivate", "revoke", "grant"]);
  });

  it("a standby ignores 'stale'", () => {
    const m = new Member();
    m.feed({ type: "start" });
    expect(m.feed({ type: "stale", reason: "x" })).toEqual([]);
  });

  it("ignores a look about a lease it has given up: the key it found 'mine' hangs on the old lease (found by the property test)", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" }); // look about L1 in flight
    m.feed({ type: "stale", reason: "x" });
    m.feed({ type: "granted", id: "L2", ttlMs: 6000, sentAtMs: 3000 });
    expect(m.feed({ type: "looked", leaseId: "L1", leader: { mine: { revision: 7 } } })).toEqual([]);
    expect(m.state.phase).toBe("standby");
    expect(m.drives).toBe(false);
  });

  it("ignores an answer about a lease it has given up, and renews the new one", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" }); // renew L1 in flight
    m.feed({ type: "stale", reason: "x" }); // gives L1 up, asks for a new lease
    m.feed({ type: "granted", id: "L2", ttlMs: 6000, sentAtMs: 3000 });
    m.feed({ type: "renewed", id: "L1", ttlMs: 6000, sentAtMs: 3000 });
    expect(m.state.lease?.id).toBe("L2");
    m.nowMs = 5000;
    expect(m.feed({ type: "tick" })).toContainEqual({ kind: "renew", id: "L2" });
  });
});

describe("shutdown", () => {
  it("stops device I/O first and revokes the lease, so the standby need not wait for the TTL", () => {
    const m = new Member();
    m.activate();
    expect(m.feed({ type: "stop" })).toEqual([
      { kind: "deactivate", reason: "shutdown", detail: "the gateway is shutting down" },
      { kind: "revoke", id: "L1" },
    ]);
    expect(m.drives).toBe(false);
    m.nowMs += 10_000;
    expect(m.feed({ type: "tick" })).toEqual([]);
    expect(leadershipWakeMs(CONFIG, m.state)).toBeNull();
  });
});

describe("retries", () => {
  it("asks for a lease again retryMs after a failed grant", () => {
    const m = new Member();
    m.feed({ type: "start" });
    expect(m.feed({ type: "grantFailed" })).toEqual([]);
    expect(leadershipWakeMs(CONFIG, m.state)).toBe(1000 + CONFIG.retryMs);
    m.nowMs += CONFIG.retryMs;
    expect(m.feed({ type: "tick" })).toEqual([{ kind: "grant", ttlMs: 6000 }]);
  });

  it("revokes a lease granted while it already has one (a grant retried after a lost answer)", () => {
    const m = new Member();
    m.activate();
    expect(m.feed({ type: "granted", id: "L9", ttlMs: 6000, sentAtMs: 1000 })).toEqual([{ kind: "revoke", id: "L9" }]);
    expect(m.state.lease?.id).toBe("L1");
  });

  it("a standby whose lease may have expired gives it up for a fresh one instead of campaigning with it", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    m.feed({ type: "looked", leaseId: "L1", leader: "other" });
    m.nowMs = 7000;
    expect(m.feed({ type: "tick" })).toEqual([
      { kind: "revoke", id: "L1" },
      { kind: "grant", ttlMs: 6000 },
    ]);
  });
});

describe("out of reach of etcd", () => {
  it("counts from the start until etcd first answers, and is out of reach only past one lease TTL", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.nowMs = 1400;
    m.feed({ type: "grantFailed" });
    m.nowMs = 7000; // exactly one TTL after the start
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(false);
    m.nowMs = 7001;
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(true);
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 7001 });
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(false);
  });

  it("counts from the first failed request after an answer, not from each retry; any answer ends it", () => {
    const m = new Member();
    m.activate();
    m.nowMs = 3000;
    m.feed({ type: "tick" });
    m.nowMs = 3400;
    m.feed({ type: "renewFailed", id: "L1" });
    m.nowMs = 3650;
    m.feed({ type: "lookFailed" });
    m.nowMs = 9400;
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(false); // stepped down, still within a TTL of the first failure
    m.feed({ type: "grantFailed" });
    m.nowMs = 9401;
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(true);
    m.feed({ type: "granted", id: "L2", ttlMs: 6000, sentAtMs: 9401 });
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(false);
  });

  it("a stopped member is not reported out of reach", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "stop" });
    m.nowMs = 60_000;
    expect(etcdOutOfReach(CONFIG, m.state, m.nowMs)).toBe(false);
  });
});

describe("members configured differently", () => {
  it("a standby whose actuators differ from another member's does not campaign for a free leader key; once they agree it does", () => {
    const m = new Member();
    m.feed({ type: "start" });
    m.feed({ type: "granted", id: "L1", ttlMs: 6000, sentAtMs: 1000 });
    expect(m.feed({ type: "looked", leaseId: "L1", leader: "none", configAgrees: false })).toEqual([]);
    expect(m.state.phase).toBe("standby");
    m.nowMs += CONFIG.lookEveryMs;
    expect(m.feed({ type: "tick" })).toEqual([{ kind: "look", leaseId: "L1" }]);
    expect(m.feed({ type: "looked", leaseId: "L1", leader: "none", configAgrees: true })).toEqual([{ kind: "campaign", leaseId: "L1" }]);
  });
});
