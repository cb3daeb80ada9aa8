/**
 * Authenticated commands end to end: the real daemon with one authenticated valve, a real
 * Mosquitto, the simulated actuator. A fencing token is not a password: it is on the
 * retained state for anyone to read. Without the lease's secret, nothing gets through.
 */
import { FencegateClient, type Lease } from "fencegate-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sign } from "../../../packages/protocol/src/index.ts";
import { TestController } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { startStack, Teardown, type Stack } from "../../support/stack.ts";

const teardown = new Teardown();
let stack: Stack;
let owner: FencegateClient;
let lease: Lease;
let forger: TestController;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "auth",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", host: sim.host, port: sim.port, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "sim", 1, "fenced", { authenticatedCommands: true })],
    }),
    fenced: ["valve-1"],
  });
  owner = teardown.add(await FencegateClient.connect({ url: stack.broker.url, holder: "line-a" }), (c) => c.close());
  forger = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  lease = await owner.acquire("valve-1", { ttlMs: 10_000 });
});

afterAll(() => teardown.run());

function deviceSnapshot() {
  const d = stack.sim.device(1);
  return { applied: d.applied.length, fence: d.fence.token, target: d.targetPosition };
}

describe("authenticated commands", () => {
  it("are signed by the client library without the caller doing anything", async () => {
    expect(await lease.command({ position: 30 })).toMatchObject({ token: lease.token, seq: 0, applied: { position: 30 } });
    expect(stack.sim.device(1).targetPosition).toBe(30);
  });

  it("refuse a forged command with the right token and holder but no secret, and change nothing", async () => {
    const before = deviceSnapshot();
    const reply = await forger.command("valve-1", lease.token, 100, { position: 99 });
    expect(reply).toMatchObject({ ok: false, error: { code: "BAD_SIGNATURE" } });
    expect(reply.error.message).toContain("mac");
    expect(deviceSnapshot()).toEqual(before);
    // The forged seq did not move the fence: the owner's next seq (1) is still accepted.
    expect(await lease.command({ position: 31 })).toMatchObject({ seq: 1 });
  });

  it.each([
    ["set", { set: { position: 98 } }],
    ["seq", { seq: 57 }],
    ["deadlineMs", { deadlineMs: 4999 }],
  ])("refuse a signed command whose %s was tampered with", async (_field, change) => {
    const body = { holder: "line-a", token: lease.token, seq: 50, set: { position: 40 }, deadlineMs: 5000 };
    const mac = sign((lease as unknown as { secret: string }).secret, { verb: "command", actuator: "valve-1", ...body });
    const before = deviceSnapshot();
    const reply = await forger.request("valve-1", "command", { ...body, ...change, mac });
    expect(reply).toMatchObject({ ok: false, error: { code: "BAD_SIGNATURE" } });
    expect(deviceSnapshot()).toEqual(before);
  });

  it("refuse an unsigned release, so nobody else can end the lease", async () => {
    const reply = await forger.request("valve-1", "lease/release", { holder: "line-a", token: lease.token });
    expect(reply).toMatchObject({ ok: false, error: { code: "BAD_SIGNATURE" } });
    expect((await owner.read("valve-1")).lease).toMatchObject({ holder: "line-a", token: lease.token });
  });

  it("do not hand the secret to a second acquire under the holder's name", async () => {
    const reply = await forger.acquire("valve-1", 5000);
    expect(reply).toMatchObject({ ok: false, error: { code: "LEASE_HELD" } });
    expect(JSON.stringify(reply)).not.toContain((lease as unknown as { secret: string }).secret);
    expect(reply.error.lease).toEqual({ holder: "line-a", token: lease.token, expiresInMs: expect.any(Number) });
  });

  it("never write the secret to the log, the state or the events", async () => {
    const secret = (lease as unknown as { secret: string }).secret;
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const retained = await owner.read("valve-1");
    expect(JSON.stringify(retained)).not.toContain(secret);
    expect(JSON.stringify(stack.daemon.logs)).not.toContain(secret);
    expect(stack.daemon.stderr).not.toContain(secret);
  });

  it("sign renewals and releases too", async () => {
    await lease.renew();
    await lease.release();
    expect((await owner.read("valve-1")).lease).toBeNull();
  });

  it("leave a stale token its ordinary refusal (its secret is gone, nothing to verify)", async () => {
    const next = await owner.acquire("valve-1", { ttlMs: 10_000 });
    expect(next.token).toBe(lease.token + 1);
    const reply = await forger.command("valve-1", lease.token, 99, { position: 1 });
    expect(reply).toMatchObject({ ok: false, error: { code: "STALE_TOKEN" } });
    await next.release();
  });
});
