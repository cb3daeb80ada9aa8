/**
 * What /healthz and the status page say about a group member: a standby is healthy and its
 * cards say it stands by; a member that has not reached etcd for longer than a lease TTL
 * answers 503 with a sentence saying so, and its cards say it cannot reach etcd.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport } from "../../support/stack.ts";

const teardown = new Teardown();
let group: GroupStack;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "health", leaseTtlMs: 2000, selfFenceMarginMs: 500, metrics: true });
  group.start(0);
  group.start(1);
});

afterAll(() => teardown.run());

async function get(i: number, path: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${group.metricsPorts[i]}${path}`);
  return { status: res.status, body: await res.json() };
}

/** Asks `path` every 100 ms until `ok` holds for the answer. */
async function answerWhen(
  i: number,
  path: string,
  ok: (status: number) => boolean,
  timeoutMs: number,
): Promise<{ status: number; body: any }> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const answer = await get(i, path);
    if (ok(answer.status)) return answer;
    if (performance.now() > deadline)
      throw new Error(`gateway ${i}: ${path} still answers ${answer.status} ${JSON.stringify(answer.body)} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("a group member's health", () => {
  it("a standby answers 200 and its cards say it stands by; the active one's cards carry the device's own state", async () => {
    const a = await group.oneActive(30_000).catch((err: Error) => {
      throw new Error(`${err.message}\n${group.daemons.map((d) => daemonReport(d ?? undefined, 12)).join("\n\n")}`);
    });
    const b = 1 - a;
    expect(await get(b, "/healthz")).toMatchObject({ status: 200, body: { ok: true, group: "standby" } });
    const standby = (await get(b, "/api/status")).body;
    expect(standby.gateway.group).toEqual({ phase: "standby", note: expect.stringMatching(/^stands by: /) });
    expect(standby.actuators[0].problem).toMatch(/^stands by: the group's active gateway serves this actuator/);
    const active = (await get(a, "/api/status")).body;
    expect(active.gateway.group).toEqual({ phase: "active", note: null });
    expect(active.actuators[0].problem).toBeNull();
  });

  it("etcd gone for longer than a lease TTL: 503 with a sentence naming etcd, the cards say cannot reach etcd", async () => {
    await group.etcd.kill(0);
    const goneAt = performance.now();
    for (const i of [0, 1]) {
      const down = await answerWhen(i, "/healthz", (status) => status === 503, 10_000);
      // Not before a whole TTL: a shorter gap is the routine retry.
      expect(performance.now() - goneAt, JSON.stringify(down.body)).toBeGreaterThan(group.leaseTtlMs);
      expect(down.body.problem).toMatch(
        /^this gateway has not reached etcd for \d+ s, longer than the lease TTL \(2 s\): it cannot serve or take over/,
      );
      expect(down.body.problem).toContain("etcdctl endpoint health --cluster");
      const page = (await get(i, "/api/status")).body;
      expect(page.gateway.health.problem).toMatch(/^this gateway has not reached etcd for \d+ s/);
      expect(page.actuators[0].problem).toMatch(/^cannot reach etcd: /);
    }
  });

  it("etcd back: 200 again once a member has an answer", async () => {
    await group.etcd.restart(0);
    for (const i of [0, 1]) await answerWhen(i, "/healthz", (status) => status === 200, 15_000);
  });
});
