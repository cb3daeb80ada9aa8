/**
 * The reason for fencing tokens: a controller that paused (a GC pause, a stalled VM) past its
 * lease's ttl and then carries on with the token it held must not move the device once
 * another controller has taken over.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a paused holder's command under its old token, arriving after another holder took over, is refused STALE_TOKEN and never reaches the device", async () => {
  const s = await Scenario.start();
  expect(await s.acquire("line-a", 300)).toMatchObject({ ok: true, lease: { holder: "line-a", token: 1 } });
  expect(await s.command("line-a", 1, 1, { position: 30 })).toMatchObject({ ok: true, outcome: "applied", token: 1, seq: 1 });

  await s.advance(400); // line-a pauses past its ttl, renewing nothing
  expect(await s.acquire("line-b", 300)).toMatchObject({ ok: true, lease: { holder: "line-b", token: 2 } });
  expect(await s.command("line-b", 2, 1, { position: 60 })).toMatchObject({ ok: true, outcome: "applied", token: 2, seq: 1 });

  // line-a wakes up and sends what it meant to send next, under the token it still holds.
  expect(await s.command("line-a", 1, 2, { position: 99 })).toMatchObject({
    ok: false,
    error: { code: "STALE_TOKEN", fence: { token: 2, seq: 1 }, lease: { holder: "line-b", token: 2 } },
  });
  expect(s.writes.map((w) => [w.holder, w.token, w.seq])).toEqual([
    ["line-a", 1, 1],
    ["line-b", 2, 1],
  ]);
  expect(s.actedOn()).toEqual([
    { token: 1, seq: 1, position: 30 },
    { token: 2, seq: 1, position: 60 },
  ]);
  expect(s.devicePosition()).toBe(60);
});
