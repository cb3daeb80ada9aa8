/**
 * The DevicePort contract, written once and run against both implementations the shell is
 * handed: the gateway's Modbus adapter (ModbusDevice on a ModbusBus) over TCP to the simulated
 * reference firmware, and the seeded simulator's port (SimDevicePort) on its own clock. The
 * simulator's verdicts are only as good as this agreement: a rule the two ports answered
 * differently would let a seed pass that the daemon fails, or the other way round.
 */
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { startSimulator } from "../../firmware-bridge/src/simulator.ts";
import { FENCE_REFUSED_EXCEPTION } from "../../packages/protocol/src/modbus-profile.ts";
import { ModbusBus } from "../../src/adapters/modbus/bus.ts";
import { ModbusDevice } from "../../src/adapters/modbus/device.ts";
import { gatewayConfigSchema } from "../../src/config/schema.ts";
import type { DeviceCommand, DevicePort } from "../../src/shell/ports.ts";
import { SimActuator, SimDevicePort } from "../../src/sim/device.ts";
import { Prng } from "../../src/sim/prng.ts";
import { World } from "../../src/sim/world.ts";
import { gatewayConfig, valve } from "../support/daemon.ts";

type Profile = "fenced" | "plain";

interface DeviceRig {
  readonly port: DevicePort;
  /** Resolves `p`, driving the rig's own clock if it has one. */
  settle<T>(p: Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** The gateway's adapter, as the daemon builds it, on a TCP connection to the simulated firmware. */
async function modbusRig(profile: Profile): Promise<DeviceRig> {
  const sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], profile, rate: 0 });
  const { host, port } = sim.tcp!;
  const config = gatewayConfigSchema.parse(
    gatewayConfig({
      brokerUrl: "mqtt://127.0.0.1:1883",
      journalPath: "unused.db",
      buses: { plc: { type: "tcp", host, port } },
      actuators: [valve("valve-1", "plc", 1, profile)],
    }),
  );
  const bus = new ModbusBus(
    {
      name: "plc",
      link: { kind: "tcp", host, port },
      timeoutMs: 1000,
      reopenMinMs: 50,
      reopenMaxMs: 200,
      quietAfterTimeoutMs: 20,
      offlineAfterFailures: 2,
      queueLimitPerUnit: 8,
    },
    pino({ level: "silent" }),
  );
  bus.addUnit(1);
  const up = new Promise<void>((resolve) => bus.once("link", () => resolve()));
  bus.start();
  await up;
  const device = new ModbusDevice({ bus, unit: 1, profile, points: config.actuators[0]!.points });
  return {
    port: device,
    settle: (p) => p,
    close: async () => {
      await bus.close();
      await sim.close();
    },
  };
}

/** The simulator's port on a fault-free line: its transactions run on the simulated clock. */
async function simulatorRig(profile: Profile): Promise<DeviceRig> {
  const world = new World(10_000);
  const unit = new SimActuator("valve-1", profile, world, 1);
  const port = new SimDevicePort(unit, world, new Prng(1), () => ({ latencyMaxMs: 5, pLostAnswer: 0, pCrc: 0, pPowerLoss: 0 }), {
    enter: (fn) => fn(),
    onUnit: () => {},
    beforeWrite: () => {},
    afterAct: () => {},
    fault: (kind) => {
      throw new Error(`no fault expected on a fault-free line, got ${kind}`);
    },
  });
  return {
    port,
    async settle(p) {
      let settled = false;
      p.then(
        () => (settled = true),
        () => (settled = true),
      );
      while (!settled) await world.run(world.nowMs + 1);
      return p;
    },
    close: async () => {},
  };
}

const RIGS: [string, (profile: Profile) => Promise<DeviceRig>][] = [
  ["the Modbus adapter over TCP to the simulated firmware", modbusRig],
  ["the simulator's device port", simulatorRig],
];

const command = (token: number, seq: number, position: number): DeviceCommand => ({ holder: "line-a", token, seq, set: { position } });

describe.each(RIGS)("DevicePort: %s", (_name, makeRig) => {
  let rig: DeviceRig | undefined;
  afterEach(async () => {
    await rig?.close();
    rig = undefined;
  });

  it("a fenced device applies a command, shows its setpoint, and reports the command's token as its fence", async () => {
    rig = await makeRig("fenced");
    const { port, settle } = rig;
    expect(await settle(port.write(command(3, 0, 40)))).toEqual({ kind: "applied", applied: { position: 40 } });
    expect((await settle(port.read())).position).toBe(40);
    expect(await settle(port.readFence())).toEqual({ token: 3, seq: null });
  });

  it("a fenced device takes each later command under one token", async () => {
    rig = await makeRig("fenced");
    const { port, settle } = rig;
    for (const [seq, position] of [
      [0, 10],
      [1, 20],
      [5, 30],
    ] as const)
      expect(await settle(port.write(command(2, seq, position)))).toEqual({ kind: "applied", applied: { position } });
    expect((await settle(port.read())).position).toBe(30);
  });

  it("a fenced device refuses a command under an older token DEVICE_REJECTED (0x46), and keeps its setpoint and fence", async () => {
    rig = await makeRig("fenced");
    const { port, settle } = rig;
    await settle(port.write(command(5, 0, 60)));
    expect(await settle(port.write(command(4, 0, 95)))).toMatchObject({
      kind: "failed",
      code: "DEVICE_REJECTED",
      modbusCode: FENCE_REFUSED_EXCEPTION,
    });
    expect((await settle(port.read())).position).toBe(60);
    expect(await settle(port.readFence())).toEqual({ token: 5, seq: null });
  });

  it("a plain device applies a command under any token, an older one too, and keeps no fence", async () => {
    rig = await makeRig("plain");
    const { port, settle } = rig;
    expect(await settle(port.write(command(5, 0, 60)))).toEqual({ kind: "applied", applied: { position: 60 } });
    expect(await settle(port.write(command(4, 0, 95)))).toEqual({ kind: "applied", applied: { position: 95 } });
    expect((await settle(port.read())).position).toBe(95);
    expect(await settle(port.readFence())).toBeNull();
  });
});
