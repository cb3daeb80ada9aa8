/**
 * A Modbus bus closed and opened again (a gateway group's member stepping down and taking
 * over again), against the simulated device over Modbus TCP: nothing of the closed session
 * may act on the new one.
 */
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { ModbusBus } from "../../../src/adapters/modbus/bus.ts";
import { freePort } from "../../support/ports.ts";
import { until } from "../../support/watch.ts";

const log = pino({ level: "silent" });
let sim: SimulatorHandle | undefined;
let bus: ModbusBus | undefined;

afterEach(async () => {
  await bus?.close();
  await sim?.close();
  bus = sim = undefined;
});

function tcpBus(port: number, timeoutMs = 400): ModbusBus {
  const b = new ModbusBus(
    {
      name: "plc",
      link: { kind: "tcp", host: "127.0.0.1", port },
      timeoutMs,
      reopenMinMs: 50,
      reopenMaxMs: 100,
      quietAfterTimeoutMs: 20,
      offlineAfterFailures: 1,
      queueLimitPerUnit: 8,
    },
    log,
  );
  b.addUnit(1);
  return b;
}

const readFence = (b: ModbusBus) => b.transact(1, "command", (c) => c.readHoldingRegisters(0x10, 4));

describe("a bus closed and started again", () => {
  it("keeps retrying to open after a close that cancelled a pending retry", async () => {
    const port = await freePort(); // nothing there yet
    bus = tcpBus(port);
    bus.start();
    await new Promise((r) => setTimeout(r, 120)); // a failed open, a retry pending
    await bus.close();
    bus.start();
    await new Promise((r) => setTimeout(r, 120));
    sim = await startSimulator({ tcp: { host: "127.0.0.1", port } });
    await until(() => bus!.isUp, { timeoutMs: 3000, what: "the bus opening once the device is there" });
  });

  it("serves the new session at once while a transaction of the old one is still waiting for its answer, and that one's timeout changes nothing", async () => {
    sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 } });
    bus = tcpBus(sim.tcp!.port, 1500);
    const offline: number[] = [];
    bus.on("unit", (_unit, online) => !online && offline.push(performance.now()));
    bus.start();
    await until(() => bus!.isUp, { timeoutMs: 3000, what: "bus open" });
    await readFence(bus);
    sim.mute(true);
    const stuck = readFence(bus).then(
      () => "answered",
      () => "failed",
    );
    await new Promise((r) => setTimeout(r, 50));
    await bus.close();
    sim.mute(false);
    bus.start();
    await until(() => bus!.isUp, { timeoutMs: 3000, what: "bus open again" });
    const t0 = performance.now();
    await readFence(bus);
    expect(performance.now() - t0).toBeLessThan(500); // not behind the old session's 1.5 s timeout
    expect(await stuck).toBe("failed");
    await new Promise((r) => setTimeout(r, 1700)); // past the old transaction's timeout
    expect(offline).toEqual([]);
    expect(bus.isUnitOnline(1)).toBe(true);
  });
});
