/**
 * A controller that heard nothing back retries with the same (token, seq): the network may
 * have lost the reply, or delivered the command twice. The retry is answered from the record
 * of the first, and the device is written once.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

const ORIGINAL = { ok: true, outcome: "applied", token: 1, seq: 7, applied: { position: 40 } };

it("a retried (token, seq), after its answer or while the first is still at the device, is answered DUPLICATE with the original outcome, without a second device write", async () => {
  const s = await Scenario.start();
  await s.acquire("line-a", 5_000);
  expect(await s.command("line-a", 1, 7, { position: 40 })).toEqual(ORIGINAL);
  expect(await s.command("line-a", 1, 7, { position: 40 })).toMatchObject({
    ok: false,
    error: { code: "DUPLICATE", original: ORIGINAL, fence: { token: 1, seq: 7 } },
  });

  // Delivered twice at once: the second waits for the first's answer, then repeats it.
  const first = s.submit({ verb: "command", holder: "line-a", token: 1, seq: 8, set: { position: 45 } });
  const again = s.submit({ verb: "command", holder: "line-a", token: 1, seq: 8, set: { position: 45 } });
  expect(await s.answer(first)).toMatchObject({ ok: true, outcome: "applied", token: 1, seq: 8 });
  expect(await s.answer(again)).toMatchObject({
    ok: false,
    error: { code: "DUPLICATE", original: { ok: true, outcome: "applied", token: 1, seq: 8, applied: { position: 45 } } },
  });

  expect(s.writes.map((w) => [w.token, w.seq])).toEqual([
    [1, 7],
    [1, 8],
  ]);
  expect(s.actedOn()).toEqual([
    { token: 1, seq: 7, position: 40 },
    { token: 1, seq: 8, position: 45 },
  ]);
});
