/**
 * The simulator as a Modbus TCP server (MBAP framing) with modbus-serial as client, the plain
 * profile over a transport, and line-rate emulation against the computed limit.
 */
import { afterEach, describe, expect, it } from "vitest";
import { FENCE_REFUSED_EXCEPTION, FENCED, PLAIN, decodePlainReadings, encodeCommandBlock, encodePlainSetpoint } from "../src/profile.ts";
import { createPtyPair } from "../src/pty.ts";
import type { PtyPair } from "../src/pty.ts";
import { transactionLimitMs } from "../src/rtu.ts";
import { startSimulator } from "../src/simulator.ts";
import type { SimulatorHandle } from "../src/simulator.ts";
import { closeMaster, failure, rtuMaster, tcpMaster, timeoutOf } from "./helpers.ts";
import type { Master } from "./helpers.ts";

let sim: SimulatorHandle | undefined;
let master: Master | undefined;
let pty: PtyPair | undefined;
afterEach(async () => {
  if (master) await closeMaster(master);
  await sim?.close();
  await pty?.close();
  master = sim = pty = undefined;
});

const block = (token: number, seq: number, position: number) => encodeCommandBlock({ token, seq, setpoints: { position } });

describe("Modbus TCP", () => {
  it("takes a command block, refuses a stale one with 0x46, and acknowledges a duplicate", async () => {
    sim = await startSimulator({ tcp: { port: 0 }, rate: 0 });
    master = await tcpMaster(sim.tcp!.port);
    await master.writeRegisters(FENCED.COMMAND_START, block(3, 0, 25));
    await master.writeRegisters(FENCED.COMMAND_START, block(3, 0, 25));
    expect((await failure(master.writeRegisters(FENCED.COMMAND_START, block(2, 5, 99)))).modbusCode).toBe(FENCE_REFUSED_EXCEPTION);
    expect(sim.device(1)).toMatchObject({ fence: { token: 3, seq: 0 }, appliedCount: 1, targetPosition: 25 });
  });

  it("corrupts a response as a wrong transaction id, which the client never takes for its answer", async () => {
    sim = await startSimulator({ tcp: { port: 0 } });
    master = await tcpMaster(sim.tcp!.port);
    sim.corruptCrc(1);
    await timeoutOf(master, () => master!.readHoldingRegisters(0, 1));
    expect(sim.counters.replies).toBe(1);
  });
});

describe("plain profile over RTU", () => {
  it("takes an FC06 setpoint and reports the position moving toward it", async () => {
    pty = await createPtyPair();
    sim = await startSimulator({ serial: { path: pty.device }, profile: "plain", rate: 1000 });
    master = await rtuMaster(pty.master);
    await master.writeRegister(PLAIN.TARGET_POSITION, encodePlainSetpoint({ position: 60 }));
    const r = decodePlainReadings((await master.readInputRegisters(PLAIN.READ_START, PLAIN.READ_COUNT)).data);
    expect(r.targetPosition).toBe(60);
    expect((await failure(master.readHoldingRegisters(FENCED.FENCE_START, 1))).modbusCode).toBe(2);
  });
});

describe("line-rate emulation", () => {
  it("never answers faster than a 115200-baud line allows (FC06: 5.03 ms)", async () => {
    pty = await createPtyPair();
    sim = await startSimulator({ serial: { path: pty.device, baud: 115200 }, lineRate: true });
    master = await rtuMaster(pty.master);
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      await master.writeRegister(FENCED.KEEPALIVE, 1);
      times.push(performance.now() - t0);
    }
    const limit = transactionLimitMs(8, 8, 115200);
    expect(limit).toBeCloseTo(5.03, 2);
    // each answer arrives no earlier than request + t3.5 + response; the trailing t3.5 is
    // spent before the next request may start
    expect(Math.min(...times)).toBeGreaterThanOrEqual(limit - 1.75 - 0.05);
    times.sort((a, b) => a - b);
    expect(times[10]!).toBeGreaterThanOrEqual(limit - 0.05);
  });
});
