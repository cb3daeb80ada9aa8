/**
 * A command's deadline is how long the gateway may hold it: one still queued behind the
 * command at the device when its deadline passes is given up, and never sent.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a command whose deadline passes while it waits behind another is refused DEADLINE_EXCEEDED and never reaches the device", async () => {
  const s = await Scenario.start();
  await s.acquire("line-a", 10_000);
  // The first takes at least 2 ms at the device (a leg of the line each way); the second may wait 1 ms.
  const first = s.submit({ verb: "command", holder: "line-a", token: 1, seq: 1, set: { position: 10 } });
  const late = s.submit({ verb: "command", holder: "line-a", token: 1, seq: 2, set: { position: 20 }, deadlineMs: 1 });

  expect(await s.answer(late)).toMatchObject({
    ok: false,
    error: { code: "DEADLINE_EXCEEDED", fence: { token: 1, seq: 1 }, lease: { holder: "line-a", token: 1 } },
  });
  expect(s.replies.has(first)).toBe(false); // still at the device
  expect(await s.answer(first)).toMatchObject({ ok: true, outcome: "applied", token: 1, seq: 1 });
  await s.advance(100);
  expect(s.writes.map((w) => w.seq)).toEqual([1]);
  expect(s.actedOn()).toEqual([{ token: 1, seq: 1, position: 10 }]);
  // Never sent, so its seq is not used up: the fence stays at the first.
  expect(s.view().fence).toEqual({ token: 1, seq: 1 });
});
