/**
 * A grant is durable before it is replied: a controller never holds a token the journal might
 * not have, which a restart would grant again to someone else.
 */
import { expect, it } from "vitest";
import { Scenario } from "./harness.ts";

it("a grant's reply is sent only after its journal commit is synced", async () => {
  const s = await Scenario.start();
  const ref = s.submit({ verb: "lease/acquire", holder: "line-a", ttlMs: 1_000 });
  expect(await s.answer(ref)).toMatchObject({ ok: true, lease: { token: 1 } });
  const durable = s.log.indexOf("durable valve-1 granted line-a 1");
  expect(durable).toBeGreaterThan(-1);
  expect(s.log.indexOf(`reply ${ref} ok`)).toBeGreaterThan(durable);
});

it("a grant whose commit dies before its sync is never replied, and its token is free again; one that dies after is never replied nor granted again", async () => {
  const s = await Scenario.start();
  s.crashAt = (records) => (records.includes("granted line-a 1") ? "beforeSync" : null);
  const lost = s.submit({ verb: "lease/acquire", holder: "line-a", ttlMs: 1_000 });
  await s.advance(100);
  expect(s.replies.has(lost)).toBe(false);
  expect(s.log).not.toContain("durable valve-1 granted line-a 1");

  s.crashAt = (records) => (records.includes("granted line-b 1") ? "afterSync" : null);
  await s.restart();
  const unanswered = s.submit({ verb: "lease/acquire", holder: "line-b", ttlMs: 1_000 });
  await s.advance(100);
  expect(s.replies.has(unanswered)).toBe(false);
  expect(s.log).toContain("durable valve-1 granted line-b 1");

  s.crashAt = () => null;
  await s.restart();
  expect(await s.acquire("line-c", 1_000)).toMatchObject({ ok: true, lease: { holder: "line-c", token: 2 } });
});
