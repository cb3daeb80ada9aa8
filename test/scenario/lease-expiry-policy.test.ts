/**
 * What happens to the device when a lease runs out (its holder stopped renewing): expiry
 * policy `safe` has the gateway write the configured safe values under a token of its own,
 * which also fences off the ended lease; `hold` leaves the device where its holder left it.
 */
import { expect, it } from "vitest";
import { GATEWAY_HOLDER } from "../../src/core/actuator.ts";
import { Scenario } from "./harness.ts";

it("under policy safe, a lease that runs out has the gateway write the safe setpoint under its own next token; under hold the device is left as it was", async () => {
  const s = await Scenario.start({
    actuators: [
      { id: "safe-valve", profile: "fenced", expiryPolicy: { kind: "safe", set: { position: 0 } } },
      { id: "held-valve", profile: "fenced", expiryPolicy: { kind: "hold" } },
    ],
  });
  for (const valve of ["safe-valve", "held-valve"]) {
    expect(await s.acquire("line-a", 200, valve)).toMatchObject({ ok: true, lease: { token: 1 } });
    expect(await s.command("line-a", 1, 1, { position: 70 }, valve)).toMatchObject({ ok: true, outcome: "applied" });
  }

  await s.advance(400); // the holder stops renewing: both leases run out

  expect(s.eventsOf("expired", "safe-valve")).toEqual([{ type: "expired", holder: "line-a", token: 1 }]);
  expect(s.log).toContain(`durable safe-valve granted ${GATEWAY_HOLDER} 2`);
  expect(s.actedOn("safe-valve")).toEqual([
    { token: 1, seq: 1, position: 70 },
    { token: 2, seq: 0, position: 0 },
  ]);
  expect(s.devicePosition("safe-valve")).toBe(0);
  expect(s.view("safe-valve")).toMatchObject({ lease: null, fence: { token: 2, seq: 0 }, safeWrite: null });
  // The ended lease's holder is fenced off by the gateway's token.
  expect(await s.command("line-a", 1, 2, { position: 71 }, "safe-valve")).toMatchObject({
    ok: false,
    error: { code: "STALE_TOKEN" },
  });

  expect(s.eventsOf("expired", "held-valve")).toEqual([{ type: "expired", holder: "line-a", token: 1 }]);
  expect(s.actedOn("held-valve")).toEqual([{ token: 1, seq: 1, position: 70 }]);
  expect(s.devicePosition("held-valve")).toBe(70);
  expect(s.view("held-valve")).toMatchObject({ lease: null, fence: { token: 1, seq: 1 }, safeWrite: null });
  expect(s.writes.filter((w) => w.actuator === "held-valve")).toHaveLength(1);
});
