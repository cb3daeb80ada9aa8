/**
 * The status page's read model, fed as the daemon feeds it (outbox events and views, the
 * journal's durable records, bus answers), on a fake monotonic clock.
 */
import { describe, expect, it } from "vitest";
import { FEED_LIMIT, MinuteCounts, StatusBoard } from "../../../../src/adapters/http/status-board.ts";
import type { CoreEvent } from "../../../../src/core/types.ts";
import type { StateView } from "../../../../src/shell/ports.ts";

function setup(expiry: "hold" | "safe" = "safe") {
  const clock = { nowMs: 1_000_000, monotonicMs: () => clock.nowMs };
  const board = new StatusBoard({
    gatewayId: "gw",
    version: "1.2.3",
    clock,
    actuators: [
      { id: "valve-1", bus: "sim", unit: 1, profile: "fenced", expiry, points: [{ name: "position", unit: "%", writable: true }] },
    ],
    facts: {
      brokerConnected: () => true,
      buses: () => [{ name: "sim", up: true }],
      auditLag: () => ({ records: 2, oldestMs: 3.4, commits: 7 }),
      journalProblem: () => null,
      healthProblem: () => null,
    },
  });
  const event = (e: CoreEvent) => board.event("valve-1", { ...e, at: new Date(0) });
  const view = (patch: Partial<StateView> = {}): StateView => ({
    actuator: "valve-1",
    online: true,
    lease: null,
    fence: { token: 0, seq: null },
    points: {},
    pointsAgeMs: null,
    gateway: "gw",
    safeWrite: null,
    pointFaults: {},
    problem: null,
    at: new Date(0),
    ...patch,
  });
  return { clock, board, event, view };
}

describe("StatusBoard", () => {
  it("keeps the newest FEED_LIMIT decisions, numbered", () => {
    const { board, event } = setup();
    for (let seq = 1; seq <= FEED_LIMIT + 50; seq++) event({ type: "accepted", holder: "a", token: 1, seq });
    const feed = board.snapshot().feed;
    expect(feed).toHaveLength(FEED_LIMIT);
    expect(feed[0]).toMatchObject({ n: 51, seq: 51 });
    expect(feed[FEED_LIMIT - 1]).toMatchObject({ n: FEED_LIMIT + 50, seq: FEED_LIMIT + 50 });
  });

  it("counts refusals by code over the last minute only", () => {
    const { board, clock, event } = setup();
    event({ type: "rejected", holder: "b", token: 1, seq: 3, code: "STALE_TOKEN" });
    clock.nowMs += 30_000;
    event({ type: "rejected", holder: "b", token: 1, seq: 4, code: "STALE_TOKEN" });
    event({ type: "rejected", holder: "c", code: "LEASE_HELD" });
    expect(board.gateway().counters.refusalsLastMinute).toEqual({ LEASE_HELD: 1, STALE_TOKEN: 2 });
    expect(board.actuator("valve-1")!.lastRefusal).toMatchObject({ holder: "c", code: "LEASE_HELD" });
    clock.nowMs += 30_500;
    expect(board.gateway().counters.refusalsLastMinute).toEqual({ LEASE_HELD: 1, STALE_TOKEN: 1 });
    clock.nowMs += 30_000;
    expect(board.gateway().counters.refusalsLastMinute).toEqual({});
  });

  it("keeps at most one bucket per second for a minute, however many refusals come", () => {
    const counts = new MinuteCounts();
    for (let i = 0; i < 10_000; i++) counts.add(i * 37, i % 2 ? "A" : "B");
    expect((counts as unknown as { buckets: unknown[] }).buckets.length).toBeLessThanOrEqual(60);
    expect(Object.values(counts.totals(9_999 * 37)).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
  });

  it("shows the set of the last accepted command whether its record is durable before or after the event", () => {
    const { board, event } = setup();
    board.durable([{ actuator: "valve-1", record: { type: "intent", holder: "a", token: 1, seq: 1, set: { position: 10 } } }]);
    event({ type: "accepted", holder: "a", token: 1, seq: 1 });
    expect(board.actuator("valve-1")!.lastAccepted).toMatchObject({ seq: 1, set: { position: 10 }, outcome: null });
    event({ type: "accepted", holder: "a", token: 1, seq: 2 });
    expect(board.actuator("valve-1")!.lastAccepted).toMatchObject({ seq: 2, set: null });
    board.durable([{ actuator: "valve-1", record: { type: "intent", holder: "a", token: 1, seq: 2, set: { position: 20 } } }]);
    event({ type: "applied", holder: "a", token: 1, seq: 2 });
    expect(board.actuator("valve-1")!.lastAccepted).toMatchObject({ seq: 2, set: { position: 20 }, outcome: "applied" });
    // A retry answered DUPLICATE is not a second outcome.
    event({ type: "rejected", holder: "a", token: 1, seq: 2, code: "DUPLICATE" });
    expect(board.actuator("valve-1")!.lastAccepted!.outcome).toBe("applied");
  });

  it("shows a safe write while the state says it is owed, with its attempts and why the last one did not settle it", () => {
    const { board, event, view } = setup("safe");
    const owed = (attempts: number) => view({ safeWrite: { token: 2, attempts, set: { position: 0 } } });
    board.state(owed(0));
    expect(board.actuator("valve-1")!.safeWrite).toMatchObject({ token: 2, attempts: 0, set: { position: 0 }, lastCode: null });
    event({ type: "accepted", holder: "@gateway", token: 2, seq: 0 });
    expect(board.snapshot().feed.at(-1)).toMatchObject({ safeWrite: true });
    event({ type: "outcome-unknown", holder: "@gateway", token: 2, seq: 0, code: "OUTCOME_UNKNOWN" });
    board.state(owed(1));
    expect(board.actuator("valve-1")!.safeWrite).toMatchObject({ attempts: 1, lastCode: "OUTCOME_UNKNOWN" });
    expect(board.gateway().counters.outcomeUnknownLastMinute).toBe(1);
    board.state(view({ safeWrite: null }));
    expect(board.actuator("valve-1")!.safeWrite).toBeNull();
  });

  it("shows point faults, the actuator's problem and the gateway serving it", () => {
    const { board, view } = setup();
    const changes: unknown[] = [];
    board.subscribe((c) => changes.push(c));
    board.state(view({ points: { position: 5 }, pointFaults: {}, problem: null }));
    board.state(
      view({ points: {}, pointsAgeMs: 1500, pointFaults: { position: "NaN" }, problem: "the device answers with malformed frames" }),
    );
    expect(changes).toHaveLength(2);
    expect(board.actuator("valve-1")).toMatchObject({
      gateway: "gw",
      problem: "the device answers with malformed frames",
      pointsAgeMs: 1500,
      points: [{ name: "position", unit: "%", value: null, fault: "NaN" }],
    });
  });

  it("follows a renewal's new expiry, and tells listeners only of changes of substance", () => {
    const { board, clock, view } = setup();
    const changes: unknown[] = [];
    board.subscribe((c) => changes.push(c));
    board.state(view({ lease: { holder: "a", token: 1, expiresInMs: 3000 } }));
    clock.nowMs += 1000;
    board.state(view({ lease: { holder: "a", token: 1, expiresInMs: 2000 } })); // a poll: same expiry
    expect(changes).toHaveLength(1);
    expect(board.actuator("valve-1")!.lease).toEqual({ holder: "a", token: 1, expiresInMs: 2000 });
    board.state(view({ lease: { holder: "a", token: 1, expiresInMs: 3000 } })); // renewed
    expect(changes).toHaveLength(2);
    expect(board.gateway().counters).toMatchObject({ online: 1, offline: 0, leases: 1 });
    clock.nowMs += 3001;
    expect(board.gateway().counters.leases).toBe(0);
  });

  it("shows the age and round trip of the device's last answer; a timeout is no answer", () => {
    const { board, clock } = setup();
    expect(board.actuator("valve-1")!.lastAnswerAgeMs).toBeNull();
    board.answer("valve-1", true, 0.0012);
    clock.nowMs += 500;
    board.answer("valve-1", false, 1);
    expect(board.actuator("valve-1")).toMatchObject({ lastAnswerAgeMs: 500, rttMs: 1.2 });
    expect(board.gateway().lastAnswerAgeMs).toEqual({ "valve-1": 500 });
  });

  it("ignores actuators it does not know", () => {
    const { board, view } = setup();
    board.event("nope", { type: "granted", holder: "a", token: 1, at: new Date(0) });
    board.state({ ...view(), actuator: "nope" });
    board.answer("nope", true, 0.001);
    expect(board.actuator("nope")).toBeUndefined();
    expect(board.snapshot().feed).toEqual([]);
  });
});
