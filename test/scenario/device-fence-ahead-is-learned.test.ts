/**
 * A fenced device keeps its own fence. When it is ahead of this gateway's journal (another
 * gateway drove it, over a copy of the journal, or the journal was restored from an old
 * backup), the device refuses this gateway's older token (exception 0x46); the gateway reads
 * the device's fence and never grants a token at or below it.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a device refusing a write with 0x46 (its fence ahead) answers DEVICE_REJECTED, ends the lease, and the next lease is granted above the device's fence", async () => {
  const s = await Scenario.start();
  expect(await s.acquire("line-a", 10_000)).toMatchObject({ ok: true, lease: { token: 1 } });
  s.writeFromElsewhere(5, 12);

  expect(await s.command("line-a", 1, 1, { position: 80 })).toMatchObject({
    ok: false,
    error: { code: "DEVICE_REJECTED", modbusCode: 0x46, fence: { token: 5, seq: null } },
  });
  expect(s.eventsOf("expired")).toEqual([{ type: "expired", holder: "line-a", token: 1, code: "STALE_TOKEN" }]);
  expect(s.log).toContain("durable valve-1 fenceObserved 5");
  expect(s.actedOn()).toEqual([]);
  expect(s.devicePosition()).toBe(12);

  expect(await s.acquire("line-b", 10_000)).toMatchObject({ ok: true, lease: { holder: "line-b", token: 6 } });
  expect(await s.command("line-b", 6, 1, { position: 81 })).toMatchObject({ ok: true, outcome: "applied", token: 6, seq: 1 });
  expect(s.deviceFence()).toBe(6);
});

it("a device whose fence is ahead at start has it learned before the first grant, which is above it", async () => {
  const s = await Scenario.start();
  s.writeFromElsewhere(9, 12);
  await s.restart(); // a journal that knows nothing of token 9

  expect(await s.acquire("line-a", 10_000)).toMatchObject({ ok: true, lease: { token: 10 } });
  expect(await s.command("line-a", 10, 1, { position: 50 })).toMatchObject({ ok: true, outcome: "applied" });
  expect(s.actedOn()).toEqual([{ token: 10, seq: 1, position: 50 }]);
});
