/**
 * Policy `safe` across a crash: the journal cannot tell whether the newest lease was still
 * live, so a restarted gateway writes the safe values under a token of its own, unless the
 * journal shows they were the last thing confirmed under the newest token.
 */
import { expect, it } from "vitest";
import { GATEWAY_HOLDER } from "../../src/core/actuator.ts";
import { Scenario } from "./harness.ts";

const SAFE = [{ id: "valve-1", profile: "fenced" as const, expiryPolicy: { kind: "safe" as const, set: { position: 0 } } }];

it("under policy safe, a restart after a controller's lease writes the safe setpoint under the gateway's next token", async () => {
  const s = await Scenario.start({ actuators: SAFE });
  await s.acquire("line-a", 10_000);
  expect(await s.command("line-a", 1, 1, { position: 70 })).toMatchObject({ ok: true, outcome: "applied" });

  await s.restart();

  expect(s.eventsOf("expired")).toEqual([{ type: "expired", holder: "line-a", token: 1, reason: "restart" }]);
  expect(s.log).toContain(`durable valve-1 granted ${GATEWAY_HOLDER} 2`);
  expect(s.actedOn()).toEqual([
    { token: 1, seq: 1, position: 70 },
    { token: 2, seq: 0, position: 0 },
  ]);
  expect(s.view()).toMatchObject({ fence: { token: 2, seq: 0 }, safeWrite: null });
  expect(await s.acquire("line-a", 10_000)).toMatchObject({ ok: true, lease: { token: 3 } });
});

it("a restart owes no safe write when the journal shows the safe values confirmed under the newest token", async () => {
  const s = await Scenario.start({ actuators: SAFE });
  await s.acquire("line-a", 200);
  await s.command("line-a", 1, 1, { position: 70 });
  await s.advance(600); // expired, the safe write confirmed, and its audit records synced (lagMs 200)
  expect(s.log).toContain(`durable valve-1 outcome 2 0`);
  const written = s.writes.length;

  await s.restart();
  await s.advance(500);

  expect(s.writes).toHaveLength(written);
  expect(s.eventsOf("granted")).toEqual([{ type: "granted", holder: "line-a", token: 1 }]);
  expect(s.view()).toMatchObject({ fence: { token: 2, seq: 0 }, safeWrite: null });
});
