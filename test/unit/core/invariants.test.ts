/** The invariants have teeth: each names what a broken state or step breaks, and the harness's assertion throws on it. */
import { describe, expect, it } from "vitest";
import { EMPTY_SNAPSHOT, initialState, step } from "../../../src/core/actuator.ts";
import { assertStep, InvariantError, stateViolations, stepViolations } from "../../../src/core/invariants.ts";
import type { Input } from "../../../src/core/types.ts";
import { grantReplyBeforeDurableStep } from "../../sim/broken-steps.ts";
import { CONFIG, CoreDriver } from "./harness.ts";

describe("core invariants", () => {
  it("a fresh state and a lease taken by the real core break none", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    expect(stateViolations(CONFIG, d.state)).toEqual([]);
  });

  it("names a fence above the highest token granted", () => {
    const state = { ...initialState(EMPTY_SNAPSHOT), fence: { token: 5, seq: 1 } };
    expect(stateViolations(CONFIG, state)).toEqual(["the fence (5, 1) is above the highest token granted, 0"]);
  });

  it("names a grant replied before it is durable, and assertStep throws InvariantError for it", () => {
    const before = step(CONFIG, initialState(EMPTY_SNAPSHOT), { type: "link", online: true, nowMs: 1_000 }).state;
    const input: Input = { type: "acquire", ref: 1, holder: "A", ttlMs: 1_000, nowMs: 1_000 };
    const result = grantReplyBeforeDurableStep(CONFIG, before, input);
    expect(stepViolations(CONFIG, before, input, result)).toContain("a lease of token 1 replied before its grant is durable");
    expect(() => assertStep(CONFIG, before, input, result)).toThrow(InvariantError);
    expect(() => assertStep(CONFIG, before, input, step(CONFIG, before, input))).not.toThrow();
  });

  it("names a lease, or a safe write owed, still resting on a grant the group refused", () => {
    const d = new CoreDriver();
    d.acquire("A", 1_000);
    const before = d.state;
    const input: Input = { type: "grantFailed", token: 1, reason: "etcd did not answer", withheld: [], nowMs: d.nowMs };
    const keptLease = { state: before, effects: [] };
    expect(stepViolations(CONFIG, before, input, keptLease)).toContain("the lease of token 1 outlived the group's refusal of its grant");
    const owed = { ...before, lease: null, safeWrite: { token: 1, seq: 0, attempts: 0, notBeforeMs: 0 } };
    expect(stepViolations(CONFIG, before, input, { state: owed, effects: [{ kind: "stateChanged" }] })).toContain(
      "a safe write is owed under token 1, which the group never confirmed",
    );
    expect(stepViolations(CONFIG, before, input, step(CONFIG, before, input))).toEqual([]);
  });
});
