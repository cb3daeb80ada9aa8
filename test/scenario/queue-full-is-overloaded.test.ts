/**
 * Each actuator holds a bounded queue of commands waiting for the device (queueLimit); a
 * command beyond it is refused at once rather than waiting without bound.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a command arriving with the actuator's queue full (queueLimit 4) is refused OVERLOADED and never sent; the queued ones all are", async () => {
  const s = await Scenario.start();
  await s.acquire("line-a", 10_000);
  const refs = [1, 2, 3, 4, 5, 6].map((seq) => s.submit({ verb: "command", holder: "line-a", token: 1, seq, set: { position: seq } })); // one at the device, four queued, one too many

  expect(await s.answer(refs[5]!)).toMatchObject({
    ok: false,
    error: { code: "OVERLOADED", message: "The actuator's queue is full (4); retry later.", fence: { token: 1, seq: 1 } },
  });
  for (const ref of refs.slice(0, 5)) expect(await s.answer(ref)).toMatchObject({ ok: true, outcome: "applied" });
  expect(s.actedOn().map((a) => a.seq)).toEqual([1, 2, 3, 4, 5]);
});
