/**
 * The rate budgets of everyone but the lease holder (src/adapters/mqtt/request-budgets.ts), at
 * their limits: per requester, shared per actuator, refused once then dropped, refilled
 * with time, and a bounded number of requesters tracked.
 */
import { describe, expect, it } from "vitest";
import { REFUSED_QUIET_MS, RequestBudgets } from "../../../../src/adapters/mqtt/request-budgets.ts";

const limits = { perRequesterPerS: 10, perRequesterBurst: 5, perActuatorPerS: 100, perActuatorBurst: 8 };
const MAX_REQUESTERS = 4;

function takeN(b: RequestBudgets, n: number, requester: (i: number) => string, nowMs = 0, actuator = "valve-1") {
  return Array.from({ length: n }, (_, i) => b.take(actuator, requester(i), nowMs));
}

describe("request budgets", () => {
  it("admits a requester's burst, refuses the next one OVERLOADED once, then drops the rest for a second", () => {
    const b = new RequestBudgets(limits);
    expect(takeN(b, 8, () => "x")).toEqual(["admit", "admit", "admit", "admit", "admit", "refuse", "drop", "drop"]);
    // Another requester has its own budget.
    expect(b.take("valve-1", "y", 0)).toBe("admit");
    // Another actuator has its own too.
    expect(b.take("valve-2", "x", 0)).toBe("admit");
    // Refilled at 10 a second: one more after 100 ms; refused (not dropped) again once the quiet second is over.
    expect(b.take("valve-1", "x", 100)).toBe("admit");
    expect(b.take("valve-1", "x", 100)).toBe("drop");
    expect(takeN(b, 7, () => "x", 100 + REFUSED_QUIET_MS)).toEqual(["admit", "admit", "admit", "admit", "admit", "refuse", "drop"]);
  });

  it("bounds everyone together per actuator: a new holder name per request gets only the shared burst", () => {
    const b = new RequestBudgets(limits);
    const got = takeN(b, 20, (i) => `name-${i}`);
    expect(got.filter((r) => r === "admit")).toHaveLength(limits.perActuatorBurst);
    expect(got.slice(limits.perActuatorBurst)).toEqual(["refuse", ...Array(20 - limits.perActuatorBurst - 1).fill("drop")]);
  });

  it("tracks a bounded number of requesters per actuator, forgetting those whose bucket has refilled", () => {
    const b = new RequestBudgets({ ...limits, perActuatorBurst: 1000, perActuatorPerS: 1000 }, MAX_REQUESTERS);
    const tracked = (b as unknown as { actuators: Map<string, { requesters: Map<string, unknown> }> }).actuators;
    takeN(b, 100, (i) => `name-${i}`);
    expect(tracked.get("valve-1")!.requesters.size).toBe(MAX_REQUESTERS);
    // A second later every bucket has refilled: the next new name makes room by forgetting them.
    b.take("valve-1", "late", 1000);
    expect([...tracked.get("valve-1")!.requesters.keys()]).toEqual(["late"]);
  });
});
