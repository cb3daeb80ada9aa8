/**
 * The simulator as a Modbus TCP server (MBAP framing) with modbus-serial as client, the plain
 * profile over a transport, and line-rate emulation against the computed limit.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  FENCE_REFUSED_EXCEPTION,
  FENCED,
  PLAIN,
  decodePlainReadings,
  encodeCommandBlock,
  encodePlainSetpoint,
} from "../../packages/protocol/src/modbus-profile.ts";
import { createPtyPair } from "../src/pty.ts";
import type { PtyPair } from "../src/pty.ts";
import { charsMs, t35Ms, transactionLimitMs } from "../../packages/protocol/src/rtu.ts";
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
    const roundTrips: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      await master.writeRegister(FENCED.KEEPALIVE, 1);
      roundTrips.push(performance.now() - t0);
    }
    const limit = transactionLimitMs(8, 8, 115200);
    expect(limit).toBeCloseTo(5.03, 2);
    const t35 = t35Ms(115200);
    const exchange = charsMs(8, 115200) + t35 + charsMs(8, 115200); // request + t3.5 + response
    // Sums of the same terms in another order differ in the last bits of a double.
    const rounding = 1e-9;
    // The simulator's own record, on its own clock: each answer left no earlier than the
    // exchange after its request started, which is when it was taken or, if later, when the
    // trailing t3.5 after the previous answer (as actually written) ended.
    const answers = sim.answerTimes;
    expect(answers).toHaveLength(20);
    answers.forEach((a, i) => {
      const start = i === 0 ? a.receivedAtMs : Math.max(a.receivedAtMs, answers[i - 1]!.sentAtMs + t35);
      expect(a.sentAtMs - start).toBeGreaterThanOrEqual(exchange - rounding);
      if (i > 0) expect(a.sentAtMs - answers[i - 1]!.sentAtMs).toBeGreaterThanOrEqual(limit - rounding);
    });
    // The master, on the same clock (same process), asked before the request was taken and
    // heard after the answer left: its round trip is never shorter than the exchange. It is
    // not the whole limit: whatever time the master spends between hearing one answer and
    // asking again comes off the trailing t3.5 the simulator still waits out.
    expect(Math.min(...roundTrips)).toBeGreaterThanOrEqual(exchange - rounding);
  });
});
