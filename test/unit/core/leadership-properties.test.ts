/**
 * The group's safety claim, over random schedules: at no moment may two gateways drive the
 * devices. Two (or three) leadership machines run against a model of etcd (leases that
 * expire `ttl` after etcd last processed a grant or renewal, a leader key attached to a
 * lease and created only if absent), with random message delays, lost requests and lost
 * answers, timeouts whose request may still have been applied, processes paused for
 * seconds, and crashes followed by restarts. At every event, `mayDriveDevices` is evaluated
 * for every member at that moment, paused ones included (a paused process checks it again
 * before its next frame, with the time it wakes up at).
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  INITIAL_LEADERSHIP,
  leadershipConfig,
  leadershipStep,
  leadershipWakeMs,
  mayDriveDevices,
  type LeadershipConfig,
  type LeadershipEffect,
  type LeadershipEvent,
  type LeadershipInput,
  type LeadershipState,
} from "../../../src/core/leadership.ts";
import { Prng } from "../../../src/sim/prng.ts";

interface Fault {
  readonly member: number;
  readonly atMs: number;
  /** A pause of `ms`, or a crash with a restart after `ms`. */
  readonly kind: "pause" | "crash";
  readonly ms: number;
}

interface WorldOptions {
  readonly seed: number;
  readonly members: number;
  readonly config: LeadershipConfig;
  readonly maxDelayMs: number;
  readonly lossRate: number;
  readonly timeoutMs: number;
  readonly faults: readonly Fault[];
  readonly untilMs: number;
}

interface Outcome {
  readonly violations: string[];
  readonly activations: number;
  /** Per member: the moments it became active. */
  readonly activeAt: number[][];
}

type Event = { at: number; seq: number; run: () => void };

/** The world: etcd's model, the members, a clock and an event queue. */
function simulate(o: WorldOptions): Outcome {
  const prng = new Prng(o.seed);
  const random = () => prng.float();
  const events: Event[] = [];
  let seq = 0;
  let now = 0;
  const schedule = (at: number, run: () => void) => {
    events.push({ at: Math.max(at, now), seq: seq++, run });
  };

  // etcd
  const leases = new Map<string, number>(); // id -> expires at (etcd's view)
  let leader: { member: number; incarnation: number; revision: number; lease: string } | null = null;
  let revision = 1;
  let nextLease = 1;
  const expire = () => {
    for (const [id, at] of leases) {
      if (now >= at) {
        leases.delete(id);
        if (leader?.lease === id) leader = null;
      }
    }
  };

  // members
  const members = Array.from({ length: o.members }, () => ({
    state: INITIAL_LEADERSHIP as LeadershipState,
    pausedUntil: -1,
    crashed: false,
    incarnation: 0,
    queue: [] as LeadershipEvent[],
    wakeToken: 0,
  }));
  const violations: string[] = [];
  const activeAt: number[][] = members.map(() => []);
  let activations = 0;

  const check = () => {
    const driving = members.map((m, i) => (!m.crashed && mayDriveDevices(o.config, m.state, now) ? i : -1)).filter((i) => i >= 0);
    if (driving.length > 1 && violations.length < 5)
      violations.push(`at ${now} ms members ${driving.join(" and ")} may both drive the devices`);
  };

  const feed = (i: number, input: LeadershipEvent) => {
    const m = members[i]!;
    if (m.crashed) return;
    if (now < m.pausedUntil) {
      m.queue.push(input);
      return;
    }
    const result = leadershipStep(o.config, m.state, { ...input, nowMs: now } satisfies LeadershipInput);
    m.state = result.state;
    for (const e of result.effects) perform(i, m.incarnation, e);
    armWake(i);
  };

  const armWake = (i: number) => {
    const m = members[i]!;
    const token = ++m.wakeToken;
    const at = leadershipWakeMs(o.config, m.state);
    if (at !== null) schedule(at, () => token === m.wakeToken && feed(i, { type: "tick" }));
  };

  /** One request: to etcd after a delay (or lost), its answer back after a delay (or lost), a timeout at the member. */
  const request = (i: number, incarnation: number, apply: () => LeadershipEvent, failed: LeadershipEvent | null) => {
    const m = members[i]!;
    let settled = false;
    const sentAt = now;
    const delay = () => Math.floor(random() * o.maxDelayMs);
    if (random() >= o.lossRate) {
      schedule(sentAt + delay(), () => {
        expire();
        const answer = apply();
        if (random() >= o.lossRate) {
          schedule(now + delay(), () => {
            if (settled || m.incarnation !== incarnation) return;
            settled = true;
            feed(i, answer);
          });
        }
      });
    }
    if (failed !== null) {
      schedule(sentAt + o.timeoutMs, () => {
        if (settled || m.incarnation !== incarnation) return;
        settled = true;
        feed(i, failed);
      });
    }
  };

  const perform = (i: number, incarnation: number, e: LeadershipEffect) => {
    const sentAtMs = now;
    switch (e.kind) {
      case "grant":
        return request(
          i,
          incarnation,
          () => {
            const id = `L${nextLease++}`;
            leases.set(id, now + e.ttlMs);
            return { type: "granted", id, ttlMs: e.ttlMs, sentAtMs };
          },
          { type: "grantFailed" },
        );
      case "renew":
        return request(
          i,
          incarnation,
          () => {
            const alive = leases.has(e.id);
            if (alive) leases.set(e.id, now + o.config.ttlMs);
            return { type: "renewed", id: e.id, ttlMs: alive ? o.config.ttlMs : 0, sentAtMs };
          },
          { type: "renewFailed", id: e.id },
        );
      case "look":
        return request(
          i,
          incarnation,
          () => ({
            type: "looked",
            leaseId: e.leaseId,
            leader: leader === null ? "none" : leader.lease === e.leaseId ? { mine: { revision: leader.revision } } : "other",
          }),
          { type: "lookFailed" },
        );
      case "campaign":
        return request(
          i,
          incarnation,
          () => {
            if (leader === null && leases.has(e.leaseId)) {
              leader = { member: i, incarnation, revision: ++revision, lease: e.leaseId };
              return { type: "campaigned", won: { revision: leader.revision } };
            }
            return { type: "campaigned", won: null };
          },
          { type: "campaignFailed" },
        );
      case "revoke":
        return request(
          i,
          incarnation,
          () => {
            leases.delete(e.id);
            if (leader?.lease === e.id) leader = null;
            return { type: "tick" };
          },
          null,
        );
      case "activate":
        activations++;
        activeAt[i]!.push(now);
        return;
      case "deactivate":
        return;
    }
  };

  for (let i = 0; i < members.length; i++) schedule(Math.floor(random() * 50), () => feed(i, { type: "start" }));
  for (const f of o.faults) {
    if (f.member >= members.length) continue;
    schedule(f.atMs, () => {
      const m = members[f.member]!;
      if (m.crashed || now < m.pausedUntil) return;
      if (f.kind === "pause") {
        m.pausedUntil = now + f.ms;
        schedule(m.pausedUntil, () => {
          const queued = m.queue.splice(0);
          for (const input of queued) feed(f.member, input);
          feed(f.member, { type: "tick" });
        });
      } else {
        m.crashed = true; // its lease lives on in etcd until it expires
        schedule(now + f.ms, () => {
          m.crashed = false;
          m.incarnation++;
          m.state = INITIAL_LEADERSHIP;
          m.queue = [];
          feed(f.member, { type: "start" });
        });
      }
    });
  }

  while (events.length > 0) {
    events.sort((a, b) => a.at - b.at || a.seq - b.seq);
    const e = events.shift()!;
    if (e.at > o.untilMs) break;
    now = e.at;
    e.run();
    check();
  }
  return { violations, activations, activeAt };
}

const TTL_MS = 3000;

const faultArb = fc.record({
  member: fc.integer({ min: 0, max: 2 }),
  atMs: fc.integer({ min: 0, max: 25_000 }),
  kind: fc.constantFrom("pause" as const, "crash" as const),
  ms: fc.integer({ min: 100, max: 3 * TTL_MS }),
});

describe("leadership against a model of etcd", () => {
  it("never lets two gateways drive the devices at once: delays, lost messages, timeouts, pauses, crashes", () => {
    fc.assert(
      fc.property(
        fc.integer(),
        fc.constantFrom(2, 3),
        fc.constantFrom(0, 100, 500),
        fc.integer({ min: 0, max: 800 }),
        fc.constantFrom(0, 0.05, 0.2),
        fc.array(faultArb, { maxLength: 8 }),
        (seed, members, marginMs, maxDelayMs, lossRate, faults) => {
          const config = leadershipConfig(TTL_MS, marginMs);
          const result = simulate({ seed, members, config, maxDelayMs, lossRate, timeoutMs: 1000, faults, untilMs: 30_000 });
          expect(result.violations).toEqual([]);
        },
      ),
      { numRuns: Number(process.env.FENCEGATE_PROPERTY_RUNS ?? 150) },
    );
  });

  it("the check has teeth: without the margin check (driving until the lease's etcd expiry + 1 s) it finds two drivers", () => {
    const config = leadershipConfig(TTL_MS, -1000); // a negative margin: drives past the lease
    const pauseOf = (member: number): Fault[] => [{ member, atMs: 5000, kind: "pause", ms: 2 * TTL_MS }];
    const found = [1, 2, 3].some((seed) =>
      [0, 1].some(
        (member) =>
          simulate({ seed, members: 2, config, maxDelayMs: 20, lossRate: 0, timeoutMs: 1000, faults: pauseOf(member), untilMs: 20_000 })
            .violations.length > 0,
      ),
    );
    expect(found).toBe(true);
  });

  it("one gateway becomes active when nothing fails, and the other takes over within TTL + a look after the first crashes", () => {
    const config = leadershipConfig(TTL_MS, 500);
    const result = simulate({ seed: 1, members: 2, config, maxDelayMs: 5, lossRate: 0, timeoutMs: 1000, faults: [], untilMs: 10_000 });
    expect(result.activations).toBe(1);
    const first = result.activeAt.findIndex((a) => a.length === 1);
    const crashAt = 5000;
    const after = simulate({
      seed: 1,
      members: 2,
      config,
      maxDelayMs: 5,
      lossRate: 0,
      timeoutMs: 1000,
      faults: [{ member: first, atMs: crashAt, kind: "crash", ms: 60_000 }],
      untilMs: 20_000,
    });
    const other = after.activeAt[1 - first]!;
    expect(other).toHaveLength(1);
    expect(other[0]! - crashAt).toBeLessThanOrEqual(TTL_MS + config.lookEveryMs + 20);
  });
});
