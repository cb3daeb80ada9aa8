/**
 * Replayed signed requests, end to end: the real daemon with an
 * authenticated valve, a real Mosquitto, the simulated actuator. One captured signed renew,
 * replayed every 1.2 s, kept a dead holder's 2 s lease alive (and postponed its safe
 * expiry) for as long as the replays went on. Renew and release now carry a counter under
 * the MAC that must rise; a replay is refused REPLAYED_REQUEST and changes nothing.
 */
import { FencegateClient } from "fencegate-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sign } from "../../../packages/protocol/src/index.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { startStack, Teardown, type Stack } from "../../support/stack.ts";
import { TopicWatcher, safeJson } from "../../support/watch.ts";

const teardown = new Teardown();
let stack: Stack;
let attacker: TestController;
let spy: TopicWatcher;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "replay",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", host: sim.host, port: sim.port, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "sim", 1, "fenced", { authenticatedCommands: true })],
    }),
    fenced: ["valve-1"],
  });
  attacker = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  // Sees the requests on the wire, as someone sniffing the network or the broker would.
  spy = teardown.add(await TopicWatcher.connect(stack.broker.url, ["fencegate/valve-1/lease/renew", "fencegate/valve-1/events"]), (w) =>
    w.close(),
  );
});

afterAll(() => teardown.run());

/** Acquires valve-1 for `holder` with the client library and returns the lease and its secret. */
async function leaseFor(holder: string, ttlMs: number) {
  const owner = await FencegateClient.connect({ url: stack.broker.url, holder });
  const lease = await owner.acquire("valve-1", { ttlMs });
  return { owner, lease, secret: (lease as unknown as { secret: string }).secret };
}

describe("replayed signed requests", () => {
  it("a captured renew replayed every 1.2 s is refused REPLAYED_REQUEST, and the dead holder's 2 s lease expires on time", async () => {
    const from = spy.mark();
    const { owner, lease } = await leaseFor("line-a", 2000);
    const captured = await spy.waitForJson("fencegate/valve-1/lease/renew", (b) => b.holder === "line-a" && b.token === lease.token, {
      from,
    });
    await owner.close(); // the holder dies: no more renewals of its own
    const diedAtMs = performance.now();
    const replies: Json[] = [];
    let expired: Record<string, any> | null = null;
    spy
      .waitForJson("fencegate/valve-1/events", (e) => e.type === "expired" && e.token === lease.token, { from, timeoutMs: 8000 })
      .then(
        (e) => (expired = e),
        () => {},
      );
    while (expired === null && performance.now() - diedAtMs < 6000) {
      replies.push(await attacker.request("valve-1", "lease/renew", captured));
      await new Promise((r) => setTimeout(r, 1200));
    }
    expect(expired).not.toBeNull();
    expect(captured).toMatchObject({ counter: 1, mac: expect.stringMatching(/^[0-9a-f]{64}$/) });
    // The lease ran out one TTL after the last renewal its holder sent, not later: timed on
    // the daemon's own clock (the events' "at"), where neither this loop's 1.2 s sleeps nor
    // the broker's delivery to us count. Late by at most 1 s of the daemon's own timer
    // lateness on a loaded machine, less than the replay period: a replay 1.2 s or more
    // after that renewal that postponed the expiry would show.
    const renewedAt = spy.messages
      .slice(from)
      .map((m) => (m.topic === "fencegate/valve-1/events" ? safeJson(m.payload) : null))
      .filter((e) => e?.type === "renewed" && e.token === lease.token)
      .map((e) => Date.parse(e!.at));
    expect(renewedAt.length).toBeGreaterThan(0);
    const lateMs = Date.parse(expired!.at) - Math.max(...renewedAt) - 2000;
    expect(lateMs).toBeLessThan(1000);
    expect(replies.length).toBeGreaterThan(0);
    for (const r of replies) {
      expect(r.ok).toBe(false);
      expect(["REPLAYED_REQUEST", "LEASE_EXPIRED"]).toContain(r.error.code);
    }
    expect(replies[0]!.error).toMatchObject({
      code: "REPLAYED_REQUEST",
      message: expect.stringContaining("replayed request changes nothing"),
    });
    const refusals = spy.messages
      .slice(from)
      .map((m) => safeJson(m.payload))
      .filter((e) => e?.type === "rejected" && e.code === "REPLAYED_REQUEST");
    expect(refusals.length).toBeGreaterThan(0);
  });

  it("a signed renew needs a counter above the lease's last; gaps are fine", async () => {
    const { owner, lease, secret } = await leaseFor("line-b", 10_000);
    try {
      const renew = (counter?: number) => {
        const body = { holder: "line-b", token: lease.token, ...(counter === undefined ? {} : { counter }) };
        return attacker.request("valve-1", "lease/renew", {
          ...body,
          mac: sign(secret, { verb: "lease/renew", actuator: "valve-1", ...body }),
        });
      };
      expect((await renew()).error).toMatchObject({ code: "BAD_SIGNATURE", message: expect.stringContaining("must carry counter") });
      expect(await renew(5)).toMatchObject({ ok: true });
      expect((await renew(5)).error.code).toBe("REPLAYED_REQUEST");
      expect((await renew(4)).error.code).toBe("REPLAYED_REQUEST");
      expect(await renew(9)).toMatchObject({ ok: true });
      // The counter is under the mac: raising it on a captured request breaks the mac.
      const body = { holder: "line-b", token: lease.token, counter: 10 };
      const mac = sign(secret, { verb: "lease/renew", actuator: "valve-1", ...body });
      expect((await attacker.request("valve-1", "lease/renew", { ...body, counter: 11, mac })).error.code).toBe("BAD_SIGNATURE");
      // The client library numbers its own above what it sent; the gateway's last is 9 now,
      // from requests it did not make, so its next renewal is refused as a replay.
      await expect(lease.renew()).rejects.toMatchObject({ code: "REPLAYED_REQUEST" });
    } finally {
      await owner.close();
    }
  });
});
