/**
 * The simulator as a Modbus RTU slave on a real pty pair (socat), driven by modbus-serial as
 * master: command blocks, read-back, refusals with the documented exception, duplicates,
 * bad CRC, power cycles, several units, and fault injection.
 */
import fs from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  FENCE_REFUSED_EXCEPTION,
  FENCED,
  REFUSAL,
  decodeFence,
  decodeIdentity,
  decodeReadback,
  encodeCommandBlock,
  PROFILE_MAGIC,
} from "../../packages/protocol/src/modbus-profile.ts";
import { createPtyPair } from "../src/pty.ts";
import type { PtyPair } from "../src/pty.ts";
import { withCrc } from "../../packages/protocol/src/rtu.ts";
import { startSimulator } from "../src/simulator.ts";
import type { SimulatorHandle, SimulatorOptions } from "../src/simulator.ts";
import { closeMaster, failure, rawExchange, rtuMaster, sleep, tempDir, timeoutOf, waitUntil } from "./helpers.ts";
import type { Master } from "./helpers.ts";

let pty: PtyPair;
let dir: string;
let sim: SimulatorHandle | undefined;
let master: Master | undefined;

async function start(over: Partial<SimulatorOptions> = {}): Promise<SimulatorHandle> {
  sim = await startSimulator({ serial: { path: pty.device }, stateFile: path.join(dir, "eeprom.json"), rate: 0, ...over });
  return sim;
}

const block = (token: number, seq: number, position: number) => encodeCommandBlock({ token, seq, setpoints: { position } });

async function readback(m: Master) {
  return decodeReadback((await m.readHoldingRegisters(FENCED.READBACK_START, FENCED.READBACK_COUNT)).data);
}

beforeAll(async () => {
  pty = await createPtyPair();
});
afterAll(async () => {
  await pty.close();
});
beforeEach(async () => {
  dir = tempDir();
  await start();
  master = await rtuMaster(pty.master);
});
afterEach(async () => {
  if (master) await closeMaster(master);
  master = undefined;
  await sim?.close();
  sim = undefined;
  fs.rmSync(dir, { recursive: true, force: true });
});

const m = () => master!;
const s = () => sim!;

describe("fenced actuator over a pty, modbus-serial master", () => {
  it("identifies itself as a fenced profile v1.0 device", async () => {
    const id = decodeIdentity((await m().readHoldingRegisters(FENCED.IDENTITY_START, FENCED.IDENTITY_COUNT)).data);
    expect(id).toMatchObject({ magic: PROFILE_MAGIC, profileId: 1, profileVersion: 0x0101, setpointCount: 1 });
    // FC04 is an alias of the same table
    expect((await m().readInputRegisters(FENCED.MAGIC, 1)).data).toEqual([PROFILE_MAGIC]);
  });

  it("writes a command block with one FC16 and reads back fence and position", async () => {
    await m().writeRegisters(FENCED.COMMAND_START, block(12, 1, 37.5));
    const rb = await readback(m());
    expect(rb.fence).toMatchObject({ token: 12, seq: 1, lastRefusalReason: REFUSAL.NONE });
    expect(rb.readings).toMatchObject({ targetPosition: 37.5, actualPosition: 37.5, appliedCount: 1 });
    expect(
      s()
        .device(1)
        .applied.map((a) => [a.token, a.seq, a.setpoints.position]),
    ).toEqual([[12, 1, 37.5]]);
  });

  it("refuses a stale block with exception 0x46 and leaves the reason readable", async () => {
    await m().writeRegisters(FENCED.COMMAND_START, block(12, 1, 37.5));
    const err = await failure(m().writeRegisters(FENCED.COMMAND_START, block(11, 9, 80)));
    expect(err.modbusCode).toBe(FENCE_REFUSED_EXCEPTION);
    const fence = decodeFence((await m().readHoldingRegisters(FENCED.FENCE_START, FENCED.FENCE_COUNT)).data);
    expect(fence).toEqual({ token: 12, seq: 1, lastRefusalReason: REFUSAL.STALE_TOKEN, refusalCount: 1 });
    expect(s().device(1).targetPosition).toBe(37.5);
  });

  it("acknowledges a duplicate block with a normal response and does not act again", async () => {
    await m().writeRegisters(FENCED.COMMAND_START, block(12, 1, 37.5));
    const again = await m().writeRegisters(FENCED.COMMAND_START, block(12, 1, 37.5));
    expect(again).toEqual({ address: FENCED.COMMAND_START, length: FENCED.COMMAND_COUNT });
    expect(s().device(1).applied).toHaveLength(1);
    expect((await readback(m())).readings.appliedCount).toBe(1);
  });

  it("ignores a frame with a bad CRC (raw bytes on the pty) and answers the same frame with a good CRC", async () => {
    await closeMaster(m());
    master = undefined;
    const pdu = Buffer.alloc(7 + 14);
    pdu.set([1, 0x10, 0x00, FENCED.COMMAND_START, 0x00, FENCED.COMMAND_COUNT, 14]);
    block(3, 0, 50).forEach((w, i) => pdu.writeUInt16BE(w, 7 + 2 * i));
    const good = withCrc(pdu);
    const bad = Buffer.from(good);
    bad[bad.length - 1] = (bad[bad.length - 1] ?? 0) ^ 0x5a;
    expect(await rawExchange(pty.master, bad, 0, 100)).toHaveLength(0);
    expect(await waitUntil(() => s().counters.badFrames === 1, 1000)).toBe(true);
    expect(s().device(1)).toMatchObject({ appliedCount: 0, fence: { token: 0 } });
    const answer = await rawExchange(pty.master, good, 8);
    expect(answer).toEqual(withCrc(Buffer.from([1, 0x10, 0x00, FENCED.COMMAND_START, 0x00, FENCED.COMMAND_COUNT])));
    expect(s().device(1).fence).toMatchObject({ token: 3, seq: 0 });
  });

  it("keeps the fence across a power cycle, in-process and after a restart from the state file", async () => {
    await m().writeRegisters(FENCED.COMMAND_START, block(40, 2, 10));
    s().powerCycle();
    expect((await readback(m())).fence).toMatchObject({ token: 40, seq: 2, refusalCount: 0 });
    await s().close();
    await start(); // a new process image: only the state file remains
    expect((await readback(m())).fence).toMatchObject({ token: 40, seq: 2 });
    const err = await failure(m().writeRegisters(FENCED.COMMAND_START, block(40, 1, 10)));
    expect(err.modbusCode).toBe(FENCE_REFUSED_EXCEPTION);
    expect((await readback(m())).fence.lastRefusalReason).toBe(REFUSAL.STALE_SEQ);
  });

  it("in lose-unsynced mode a power cycle loses what was not synced", async () => {
    await s().close();
    await start({ loseUnsynced: true });
    await m().writeRegisters(FENCED.COMMAND_START, block(5, 0, 10));
    s().sync();
    await m().writeRegisters(FENCED.COMMAND_START, block(6, 0, 20));
    s().powerCycle();
    expect((await readback(m())).fence).toMatchObject({ token: 5, seq: 0 });
  });

  it("survives power loss between persist and act: no answer, then the retry is a duplicate", async () => {
    s().crashAfterPersist(1);
    expect(await timeoutOf(m(), () => m().writeRegisters(FENCED.COMMAND_START, block(8, 0, 60)))).toMatch(/timed out/i);
    const rb = await readback(m());
    expect(rb.fence).toMatchObject({ token: 8, seq: 0 });
    expect(rb.readings.targetPosition).toBe(60); // acted on at power-up from the EEPROM
    await m().writeRegisters(FENCED.COMMAND_START, block(8, 0, 60));
    expect(s().device(1).applied).toHaveLength(0);
  });

  it("answers exception 01 for an unsupported function and 02 for an address beyond the map", async () => {
    expect((await failure(m().readCoils(0, 1))).modbusCode).toBe(1);
    expect((await failure(m().readHoldingRegisters(FENCED.MAP_END - 1, 2))).modbusCode).toBe(2);
  });

  it("feeds the watchdog with keep-alives and goes to its safe position when they stop (real time, short)", async () => {
    await s().close();
    await start({ watchdogMs: 300, safePosition: 5 });
    await m().writeRegisters(FENCED.COMMAND_START, block(1, 0, 70));
    for (let i = 0; i < 8; i++) {
      await sleep(50); // 8 x 50 ms > 300 ms: only the keep-alives keep it out of safe state
      await m().writeRegister(FENCED.KEEPALIVE, 1);
    }
    expect((await readback(m())).readings).toMatchObject({ safeState: false, targetPosition: 70 });
    await sleep(400);
    expect((await readback(m())).readings).toMatchObject({ safeState: true, targetPosition: 5, actualPosition: 5 });
  });
});

describe("several units on one bus", () => {
  beforeEach(async () => {
    await closeMaster(m());
    await s().close();
    await start({ units: [1, 2] });
    master = await rtuMaster(pty.master);
  });

  it("keeps a separate fence per unit and ignores unit ids it does not have", async () => {
    await m().writeRegisters(FENCED.COMMAND_START, block(3, 0, 30));
    m().setID(2);
    await m().writeRegisters(FENCED.COMMAND_START, block(1, 0, 20)); // lower than unit 1's token: fine, other fence
    expect((await readback(m())).fence).toMatchObject({ token: 1 });
    m().setID(3);
    expect(await timeoutOf(m(), () => m().readHoldingRegisters(0, 1))).toMatch(/timed out/i);
    expect(s().device(1).fence.token).toBe(3);
  });

  it("acts on a broadcast (unit 0) without answering", async () => {
    m().setID(0);
    await timeoutOf(m(), () => m().writeRegisters(FENCED.COMMAND_START, block(9, 0, 90))).catch(() => undefined);
    expect(s().device(1).fence.token).toBe(9);
    expect(s().device(2).fence.token).toBe(9);
    expect(s().counters.replies).toBe(0);
  });
});

describe("fault injection over the pty", () => {
  it("answers a given exception without acting", async () => {
    s().answerException(6, 1);
    expect((await failure(m().writeRegisters(FENCED.COMMAND_START, block(1, 0, 10)))).modbusCode).toBe(6);
    expect(s().device(1).applied).toHaveLength(0);
    await m().writeRegisters(FENCED.COMMAND_START, block(1, 0, 10));
  });

  it("drops the response after acting: the master times out, the device moved", async () => {
    s().dropResponses(1);
    expect(await timeoutOf(m(), () => m().writeRegisters(FENCED.COMMAND_START, block(2, 0, 10)))).toMatch(/timed out/i);
    expect(s().device(1).applied).toHaveLength(1);
  });

  it("corrupts the response CRC: the master reports a CRC error", async () => {
    s().corruptCrc(1);
    expect((await failure(m().readHoldingRegisters(0, 1))).message).toMatch(/crc/i);
    expect((await m().readHoldingRegisters(0, 1)).data).toEqual([PROFILE_MAGIC]);
  });

  it("mutes and delays", async () => {
    s().mute(true);
    expect(await timeoutOf(m(), () => m().readHoldingRegisters(0, 1))).toMatch(/timed out/i);
    s().clearFaults();
    s().setDelay(120);
    const t0 = performance.now();
    await m().readHoldingRegisters(0, 1);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(115);
  });
});
