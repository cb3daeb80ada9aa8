/**
 * The failure leases alone cannot prevent, end to end through real Mosquitto, the real
 * daemon process and the simulated fenced actuator: A is granted n and goes quiet past
 * its lease; B is granted n+1 and its command is applied; then A's command with n arrives.
 * It must be refused every time, and the device must hold B's position and fence.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { TestController } from "../../support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";

const ITERATIONS = 100;
const TTL_MS = 100;

let dir: string;
let broker: Broker;
let sim: SimulatorHandle;
let daemon: DaemonProcess;
let a: TestController;
let b: TestController;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-seed-"));
  broker = await startMosquitto();
  sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], rate: 0 });
  daemon = DaemonProcess.start(
    dir,
    gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { sim: { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 500 } },
      actuators: [valve("valve-1", "sim", 1)],
    }),
  );
  await daemon.ready(["valve-1"]);
  [a, b] = await Promise.all([TestController.connect(broker.url, "controller-a"), TestController.connect(broker.url, "controller-b")]);
});

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await daemon?.kill("SIGTERM");
  await sim?.close();
  await broker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("a paused controller's command after a takeover", () => {
  it(`is refused every time over ${ITERATIONS} takeovers with random pause lengths`, async () => {
    const refusals: string[] = [];
    for (let i = 0; i < ITERATIONS; i++) {
      const granted = await a.acquire("valve-1", TTL_MS);
      expect(granted.ok).toBe(true);
      const n = granted.lease.token as number;
      const pauseMs = TTL_MS + Math.floor(Math.random() * 60); // A stops renewing; its lease runs out
      await new Promise((r) => setTimeout(r, pauseMs));

      const takeover = await b.acquire("valve-1", 5000);
      expect(takeover).toMatchObject({ ok: true, lease: { holder: "controller-b", token: n + 1 } });
      const bPosition = 1 + (i % 98);
      const applied = await b.command("valve-1", n + 1, 0, { position: bPosition });
      expect(applied).toMatchObject({ ok: true, outcome: "applied", token: n + 1, seq: 0 });

      const stale = await a.command("valve-1", n, i, { position: 99.5 });
      expect(stale.ok).toBe(false);
      refusals.push(stale.error.code);
      expect(stale.error).toMatchObject({ fence: { token: n + 1, seq: 0 }, lease: { holder: "controller-b", token: n + 1 } });

      const device = sim.device(1);
      expect(device.fence.token).toBe(n + 1);
      expect(device.targetPosition).toBe(bPosition);
      const released = await b.request("valve-1", "lease/release", { holder: "controller-b", token: n + 1 });
      expect(released).toMatchObject({ ok: true, lease: null });
    }
    expect(new Set(refusals)).toEqual(new Set(["STALE_TOKEN"]));
    // Nothing A sent after its lease ended ever reached the device.
    const applied = sim.device(1).applied;
    expect(applied.length).toBeGreaterThanOrEqual(ITERATIONS);
    expect(applied.every((entry) => entry.setpoints.position !== 99.5)).toBe(true);
  });
});
