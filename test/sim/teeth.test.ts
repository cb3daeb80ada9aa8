/**
 * The checker has teeth: with a deliberately broken acceptance rule injected into the real
 * Gateway, the simulator finds a violation within a bounded number of seeds.
 */
import { describe, expect, it } from "vitest";
import type { step } from "../../src/core/actuator.ts";
import { runSeed } from "../../src/sim/run.ts";
import {
  arrivalOnlyStep,
  forgetfulCounterStep,
  grantAfterWriteStep,
  grantReplyBeforeDurableStep,
  restartWithoutSafeWriteStep,
  safeWriteOnceStep,
  stealingAcquireStep,
  unconfirmedAppliedStep,
  unjournaledGrantStep,
  wrongMacFieldsStep,
} from "./broken-steps.ts";

const MAX_SEEDS = 200;

/** The first seed with a violation (matching `only`, when given), and that violation. */
async function firstViolation(brokenStep: typeof step, only?: RegExp): Promise<{ seed: number; violation: string } | null> {
  for (let seed = 1; seed <= MAX_SEEDS; seed++) {
    const result = await runSeed(seed, { step: brokenStep, invariants: false });
    const violation = only === undefined ? result.violations[0] : result.violations.find((v) => only.test(v));
    if (violation !== undefined) return { seed, violation };
  }
  return null;
}

describe("the simulator's checker catches a broken acceptance rule", () => {
  it("(a) fence and lease checked only at arrival, not when the command leaves the queue", async () => {
    const found = await firstViolation(arrivalOnlyStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/accepted (while the live lease|at or below the durable fence)/);
  });

  it("(b) the fence (a write's grant) persisted after the device write instead of before", async () => {
    const found = await firstViolation(grantAfterWriteStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/written to the device under a token not durably granted/);
  });

  it("(c) an applied reply for a write the device never confirmed", async () => {
    const found = await firstViolation(unconfirmedAppliedStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/"applied" replied for .*, which the device never applied/);
  });

  it("(d) grants not journaled", async () => {
    const found = await firstViolation(unjournaledGrantStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/without a durable grant|granted twice/);
  });

  it("(e) an acquire that takes a lease another holder still has", async () => {
    const found = await firstViolation(stealingAcquireStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/while lease \d+ of \S+ is live/);
  });

  it("(f) a safe write given up after one attempt, or when the device cannot be reached", async () => {
    const found = await firstViolation(safeWriteOnceStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/left at .* not at the safe values/);
  });

  it("(g) a restart that owes no safe write", async () => {
    const found = await firstViolation(restartWithoutSafeWriteStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/left at .* not at the safe values/);
  });

  it("(h) a grant replied before it is durable", async () => {
    const found = await firstViolation(grantReplyBeforeDurableStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/lease \d+ for \S+ replied without a durable grant/);
    // And what it leads to: a crash between the reply and the commit (the grant's commit
    // lost), and the restarted gateway hands the same token out again.
    const twice = await firstViolation(grantReplyBeforeDurableStep, /token (\d+) granted to \S+ after token \1 \(granted twice/);
    expect(twice, `no token granted twice in ${MAX_SEEDS} seeds`).not.toBeNull();
  });

  it("(i) an authenticated lease's replay counter forgotten: a duplicated signed renew passes", async () => {
    const found = await firstViolation(forgetfulCounterStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/signed lease\/(renew|release) of lease \d+ accepted with counter \d+, not above \d+: a replay/);
  });

  it("(j) the MAC checked over other fields than the controller signed", async () => {
    const found = await firstViolation(wrongMacFieldsStep);
    expect(found, `no violation in ${MAX_SEEDS} seeds`).not.toBeNull();
    expect(found!.violation).toMatch(/signed with its lease's secret, refused BAD_SIGNATURE/);
  });
});

describe("the core's invariants, judged at every step of a seed, catch a broken rule too", () => {
  it("a grant's reply sent before the grant is durable is named at the step that sends it", async () => {
    let found: string | undefined;
    for (let seed = 1; seed <= MAX_SEEDS && found === undefined; seed++) {
      found = (await runSeed(seed, { step: grantReplyBeforeDurableStep })).violations.find((v) => v.includes("invariant "));
    }
    expect(found, `no invariant broken in ${MAX_SEEDS} seeds`).toBeDefined();
    expect(found).toMatch(/invariant \S+ after acquire: a lease of token \d+ replied before its grant is durable/);
  });

  it("the simulator's own run with the real core breaks none", async () => {
    const result = await runSeed(7);
    expect(result.violations.filter((v) => v.includes("invariant "))).toEqual([]);
    expect(result.accepted).toBeGreaterThan(0);
  });
});
