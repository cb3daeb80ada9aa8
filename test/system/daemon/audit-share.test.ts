/**
 * The audit queue shared by two actuators, with the real daemon: a controller flooding
 * valve-1 while its records wait (a 5 s audit lag holds them, as a slow disk would) fills
 * valve-1's share of journal.auditQueueLimit and is refused OVERLOADED; valve-2's commands
 * go on; /healthz says 503 with the reason while valve-1 is refused.
 */
import http from "node:http";
import { afterAll, describe, expect, it } from "vitest";
import { TestController, type Json } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { freePort } from "../../support/ports.ts";
import { Teardown, startStack } from "../../support/stack.ts";

const teardown = new Teardown();
afterAll(() => teardown.run());

function get(url: string): Promise<{ status: number; body: Json }> {
  return new Promise((done, fail) => {
    http
      .get(url, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (c: string) => (body += c));
        res.on("end", () => done({ status: res.statusCode ?? 0, body: JSON.parse(body) }));
      })
      .on("error", fail);
  });
}

describe("the audit queue, shared by two actuators", () => {
  it("the flooding actuator is refused OVERLOADED at its share, the other's commands go on, and /healthz is 503 with the reason meanwhile", async () => {
    const port = await freePort();
    const stack = await startStack(teardown, {
      name: "audit-share",
      sim: () => ({ units: [1, 2], rate: 0 }),
      gateway: (sim) => ({
        buses: { sim: { type: "tcp", ...sim } },
        actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2)],
        // 16 records, 8 each; nothing is committed within the test but grants.
        journal: { auditQueueLimit: 16, auditLagRecords: 16, auditLagMs: 5000 },
        metricsPort: port,
      }),
      fenced: ["valve-1", "valve-2"],
    });
    const a = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
    const b = teardown.add(await TestController.connect(stack.broker.url, "line-b"), (c) => c.close());
    const tokenA = (await a.acquire("valve-1", 60_000)).lease.token as number;
    const tokenB = (await b.acquire("valve-2", 60_000)).lease.token as number;

    // Each command leaves two records (intent, outcome): four fill valve-1's share of 8.
    for (let seq = 1; seq <= 4; seq++)
      expect(await a.command("valve-1", tokenA, seq, { position: seq })).toMatchObject({ ok: true, outcome: "applied" });
    expect(await a.command("valve-1", tokenA, 5, { position: 5 })).toMatchObject({
      ok: false,
      error: { code: "OVERLOADED", message: expect.stringMatching(/8 of them this actuator's, its share/) },
    });
    const health = await get(`http://127.0.0.1:${port}/healthz`);
    expect(health.status).toBe(503);
    expect(health.body.problem).toBe(
      "the journal is 8 records behind: valve-1 holds its share of journal.auditQueueLimit (8 records each), and its commands are refused (OVERLOADED) until the disk catches up",
    );
    expect(await b.command("valve-2", tokenB, 1, { position: 9 })).toMatchObject({ ok: true, outcome: "applied" });

    // The lag passes, the records are committed: valve-1 is served again, /healthz 200.
    const lagEndsMs = performance.now() + 5000;
    while ((await get(`http://127.0.0.1:${port}/healthz`)).status !== 200) {
      expect(performance.now(), "the records are committed once their lag has passed").toBeLessThan(lagEndsMs + 2000);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await a.command("valve-1", tokenA, 6, { position: 6 })).toMatchObject({ ok: true, outcome: "applied" });
  });
});
