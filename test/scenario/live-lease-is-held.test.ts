/**
 * One holder at a time: a live lease is its holder's until it runs out or is released, and
 * renewing it keeps the token.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("while a lease is live another holder is refused LEASE_HELD (and NOT_HOLDER for a command), renewal keeps the token past the first ttl, and after release the next holder gets the next token", async () => {
  const s = await Scenario.start();
  expect(await s.acquire("line-a", 300)).toMatchObject({ ok: true, lease: { holder: "line-a", token: 1, ttlMs: 300 } });
  expect(await s.acquire("line-b", 300)).toMatchObject({ ok: false, error: { code: "LEASE_HELD", lease: { holder: "line-a", token: 1 } } });

  for (let i = 0; i < 3; i++) {
    await s.advance(200);
    expect(await s.renew("line-a", 1)).toEqual({ ok: true, lease: { holder: "line-a", token: 1, ttlMs: 300 } });
  }
  expect(await s.acquire("line-b", 300)).toMatchObject({ ok: false, error: { code: "LEASE_HELD" } });
  expect(await s.command("line-b", 1, 1, { position: 5 })).toMatchObject({ ok: false, error: { code: "NOT_HOLDER" } });

  expect(await s.release("line-a", 1)).toEqual({ ok: true, lease: null });
  expect(await s.acquire("line-b", 300)).toMatchObject({ ok: true, lease: { holder: "line-b", token: 2 } });
  expect(s.writes).toEqual([]);
});
