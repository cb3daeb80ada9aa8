/**
 * After a crash the journal knows the highest token granted but not whether its lease was
 * still live: every lease ends at a restart, and the next grant is above every token before,
 * so nothing sent under a token of the dead process is accepted again.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a restart ends every lease (expired, reason restart), refuses the old holder's token, and grants the next lease above every token before", async () => {
  const s = await Scenario.start();
  expect(await s.acquire("line-a", 10_000)).toMatchObject({ ok: true, lease: { token: 1 } });
  expect(await s.release("line-a", 1)).toMatchObject({ ok: true, lease: null });
  expect(await s.acquire("line-b", 10_000)).toMatchObject({ ok: true, lease: { token: 2 } });
  expect(await s.command("line-b", 2, 1, { position: 25 })).toMatchObject({ ok: true, outcome: "applied" });

  await s.restart(); // well inside line-b's ttl

  expect(s.eventsOf("expired")).toEqual([{ type: "expired", holder: "line-b", token: 2, reason: "restart" }]);
  expect(s.view()).toMatchObject({ lease: null, fence: { token: 2 } });
  expect(await s.renew("line-b", 2)).toMatchObject({ ok: false, error: { code: "LEASE_EXPIRED" } });
  expect(await s.command("line-b", 2, 2, { position: 26 })).toMatchObject({ ok: false, error: { code: "LEASE_EXPIRED" } });
  expect(await s.acquire("line-a", 10_000)).toMatchObject({ ok: true, lease: { holder: "line-a", token: 3 } });
  expect(await s.command("line-b", 2, 3, { position: 27 })).toMatchObject({
    ok: false,
    error: { code: "STALE_TOKEN", fence: { token: 3, seq: null } },
  });
  expect(s.actedOn()).toEqual([{ token: 2, seq: 1, position: 25 }]);
});
