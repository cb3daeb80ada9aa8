/**
 * The short chaos run of the default suite (the full one: `npm run chaos`): ten SIGKILLs of
 * the daemon at random moments under load from three controller processes, with controller
 * pauses past their TTL, controller restarts, broker restarts, serial link cuts and device
 * power cycles between them; then every safety property is checked against the device's own applied log.
 * FENCEGATE_SEED replays a schedule.
 */
import { describe, expect, it, onTestFailed } from "vitest";
import { monoMs } from "./history.ts";
import { report, runChaos } from "./harness.ts";

const SEED = Number(process.env.FENCEGATE_SEED ?? Date.now() % 2 ** 31);

describe("chaos on real processes", () => {
  it("keeps every safety property through 10 daemon kills, pauses, controller and broker restarts, link cuts and power cycles", async () => {
    // The run's own account (faults, kills, each daemon's start), printed only if the test fails
    // or times out: it shows where the time went.
    const started = monoMs();
    const account: string[] = [];
    onTestFailed(() => console.info(`chaos seed=${SEED}, what happened:\n${account.join("\n")}`));
    const result = await runChaos({
      say: (line) => account.push(`${((monoMs() - started) / 1000).toFixed(1)} s ${line}`),
      kills: 10,
      seed: SEED,
      lifeMs: [300, 1500],
      pauses: 3,
      brokerRestarts: 2,
      linkCuts: 2,
      powerCycles: 2,
      controllerRestarts: 2,
    });
    const text = report(result);
    console.info(text);
    expect(result.verdict.violations, text).toEqual([]);
    expect(result.counts).toMatchObject({ kills: 10, brokerRestarts: 2, linkCuts: 2, powerCycles: 2 });
    expect(result.counts.pauses).toBeGreaterThanOrEqual(1); // a pause is skipped while every controller is paused
    expect(result.counts.controllerRestarts).toBeGreaterThanOrEqual(1);
    // The load was real: commands reached the device in most lives, and controllers heard of it.
    expect(result.verdict.appliedAtDevice).toBeGreaterThan(50);
    expect(result.verdict.appliedReplies).toBeGreaterThan(50);
    expect(result.verdict.grants).toBeGreaterThanOrEqual(5);
  }, 180_000);
});
