/**
 * A write whose answer never arrives may or may not have moved the device: the gateway says
 * so (OUTCOME_UNKNOWN, never "applied" nor a refusal) and the controller re-reads, which
 * asks the device afresh.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a command whose device answer times out is OUTCOME_UNKNOWN with the fence still raised, and a later read shows what the device did", async () => {
  const s = await Scenario.start();
  await s.acquire("line-a", 10_000);
  expect(await s.command("line-a", 1, 1, { position: 20 })).toMatchObject({ ok: true, outcome: "applied" });

  s.dropAnswers(true); // the device acts; its answer is lost on the way back
  expect(await s.command("line-a", 1, 2, { position: 55 })).toMatchObject({
    ok: false,
    error: { code: "OUTCOME_UNKNOWN", fence: { token: 1, seq: 2 }, lease: { holder: "line-a", token: 1 } },
  });
  expect(s.eventsOf("outcome-unknown")).toEqual([{ type: "outcome-unknown", holder: "line-a", token: 1, seq: 2, code: "OUTCOME_UNKNOWN" }]);
  expect(s.actedOn().at(-1)).toEqual({ token: 1, seq: 2, position: 55 });

  s.dropAnswers(false);
  expect(await s.read()).toMatchObject({ ok: true, state: { online: true, points: { position: 55 }, fence: { token: 1, seq: 2 } } });
  // The seq is used: a retry is told the original outcome, unknown, and is not written again.
  expect(await s.command("line-a", 1, 2, { position: 55 })).toMatchObject({
    ok: false,
    error: { code: "DUPLICATE", original: { ok: false, error: { code: "OUTCOME_UNKNOWN" } } },
  });
  expect(s.writes).toHaveLength(2);
});
