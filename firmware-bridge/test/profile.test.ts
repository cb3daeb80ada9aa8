import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Device, MemoryEeprom } from "../src/device.ts";
import type { DeviceConfig } from "../src/device.ts";
import {
  EXCEPTION,
  FENCE_REFUSED_EXCEPTION,
  FENCED,
  MAX_TOKEN,
  PLAIN,
  PROFILE_MAGIC,
  REFUSAL,
  STATUS,
  decodeCommandBlock,
  decodeFence,
  decodeIdentity,
  decodePlainReadings,
  decodeReadback,
  encodeCommandBlock,
  encodeFenceRaise,
  encodePlainSetpoint,
  PROFILE_VERSION_1_0,
} from "../../packages/protocol/src/modbus-profile.ts";

const config = (over: Partial<DeviceConfig> = {}): DeviceConfig => ({
  unit: 1,
  profile: "fenced",
  watchdogMs: 0,
  safePositionRaw: 0,
  rateRawPerS: 1000, // 10 %/s
  ...over,
});

function fenced(over: Partial<DeviceConfig> = {}) {
  const eeprom = new MemoryEeprom();
  const device = new Device(config(over), eeprom, 0);
  const send = (token: number, seq: number, position: number, now = 0) =>
    device.write(FENCED.COMMAND_START, encodeCommandBlock({ token, seq, setpoints: { position } }), 16, now);
  const read = (addr: number, count: number, now = 0) => {
    const r = device.read(addr, count, now);
    if (!Array.isArray(r)) throw new Error(`read refused ${r.exception}`);
    return r;
  };
  return { eeprom, device, send, read, fence: (now = 0) => decodeFence(read(FENCED.FENCE_START, FENCED.FENCE_COUNT, now)) };
}

describe("command block encoding", () => {
  it("puts the token in 4 big-endian words, the seq in 2, then the position in 0.01 %", () => {
    expect(encodeCommandBlock({ token: 0x0001_0002_0003_0004, seq: 0x0005_0006, setpoints: { position: 12.34 } })).toEqual([
      0x0001, 0x0002, 0x0003, 0x0004, 0x0005, 0x0006, 1234,
    ]);
  });

  it("encodes 2^53-1 without precision loss", () => {
    const regs = encodeCommandBlock({ token: MAX_TOKEN, seq: 0xffff_ffff, setpoints: { position: 100 } });
    expect(regs).toEqual([0x001f, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 10000]);
    expect(decodeCommandBlock(regs).token).toBe(MAX_TOKEN);
  });

  it("round-trips every valid block", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: MAX_TOKEN }),
        fc.integer({ min: 0, max: 0xffff_ffff }),
        fc.integer({ min: 0, max: 10000 }),
        (token, seq, raw) => {
          const block = { token, seq, setpoints: { position: raw / 100 } };
          expect(decodeCommandBlock(encodeCommandBlock(block))).toEqual(block);
        },
      ),
    );
  });

  it("rejects token 0, unsafe tokens, seq beyond 32 bits and positions outside 0..100", () => {
    const sp = { position: 1 };
    expect(() => encodeCommandBlock({ token: 0, seq: 0, setpoints: sp })).toThrow(RangeError);
    expect(() => encodeCommandBlock({ token: 2 ** 53, seq: 0, setpoints: sp })).toThrow(RangeError);
    expect(() => encodeCommandBlock({ token: 1.5, seq: 0, setpoints: sp })).toThrow(RangeError);
    expect(() => encodeCommandBlock({ token: 1, seq: 2 ** 32, setpoints: sp })).toThrow(RangeError);
    expect(() => encodeCommandBlock({ token: 1, seq: 0, setpoints: { position: 100.01 } })).toThrow(RangeError);
    expect(() => encodeCommandBlock({ token: 1, seq: 0, setpoints: { position: Number.NaN } })).toThrow(RangeError);
  });
});

describe("fenced profile: accept, refuse, duplicate", () => {
  it("starts unfenced and shows its identity", () => {
    const d = fenced();
    const id = decodeIdentity(d.read(FENCED.IDENTITY_START, FENCED.IDENTITY_COUNT));
    expect(id).toMatchObject({ magic: PROFILE_MAGIC, profileId: 1, profileVersion: 0x0101, setpointCount: 1 });
    expect(d.fence()).toEqual({ token: 0, seq: 0, lastRefusalReason: REFUSAL.NONE, refusalCount: 0 });
  });

  it("accepts a greater (token, seq), stores fence and setpoint in the EEPROM, and acts", () => {
    const d = fenced();
    expect(d.send(5, 1, 50)).toBeUndefined();
    expect(d.fence()).toMatchObject({ token: 5, seq: 1 });
    expect(d.eeprom.data.get(1)).toMatchObject({ token: "5", seq: 1, target: 5000 });
    expect(d.device.snapshot(0).applied).toEqual([{ token: 5, tokenText: "5", seq: 1, setpoints: { position: 50 }, at: 0 }]);
    expect(d.send(5, 2, 60)).toBeUndefined();
    expect(d.send(6, 0, 70)).toBeUndefined();
    expect(d.fence()).toMatchObject({ token: 6, seq: 0 });
    expect(d.device.snapshot(0).appliedCount).toBe(3);
  });

  it("refuses a lower token with exception 0x46 and reason STALE_TOKEN, without acting", () => {
    const d = fenced();
    d.send(7, 3, 50);
    expect(d.send(6, 99, 10)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
    expect(d.fence()).toEqual({ token: 7, seq: 3, lastRefusalReason: REFUSAL.STALE_TOKEN, refusalCount: 1 });
    expect(d.device.snapshot(0).targetPosition).toBe(50);
  });

  it("refuses a lower seq under the same token with reason STALE_SEQ", () => {
    const d = fenced();
    d.send(7, 3, 50);
    expect(d.send(7, 2, 10)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
    expect(d.fence().lastRefusalReason).toBe(REFUSAL.STALE_SEQ);
  });

  it("acknowledges an exact repeat of the last accepted block without acting again", () => {
    const d = fenced();
    d.send(7, 3, 50);
    expect(d.send(7, 3, 50)).toBeUndefined();
    const s = d.device.snapshot(0);
    expect(s.appliedCount).toBe(1);
    expect(s.applied).toHaveLength(1);
    expect(s.refusalCount).toBe(0);
  });

  it("refuses the same (token, seq) with other contents with reason CONFLICT", () => {
    const d = fenced();
    d.send(7, 3, 50);
    expect(d.send(7, 3, 51)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
    expect(d.fence().lastRefusalReason).toBe(REFUSAL.CONFLICT);
    expect(d.device.snapshot(0).targetPosition).toBe(50);
  });

  it("refuses token 0 and out-of-range setpoints with ILLEGAL DATA VALUE and reason INVALID_VALUE", () => {
    const d = fenced();
    expect(d.device.write(FENCED.COMMAND_START, [0, 0, 0, 0, 0, 1, 100], 16, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_VALUE });
    expect(d.device.write(FENCED.COMMAND_START, [0, 0, 0, 1, 0, 1, 10001], 16, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_VALUE });
    expect(d.fence()).toMatchObject({ token: 0, lastRefusalReason: REFUSAL.INVALID_VALUE, refusalCount: 2 });
  });

  it("refuses a partial write of the command block (FC06 or a short FC16) with ILLEGAL DATA ADDRESS", () => {
    const d = fenced();
    expect(d.device.write(FENCED.COMMAND_TARGET_POSITION, [100], 6, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(d.device.write(FENCED.COMMAND_START, [0, 0, 0, 9, 0, 1], 16, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(d.fence()).toMatchObject({ token: 0, lastRefusalReason: REFUSAL.PARTIAL_BLOCK });
  });

  it("refuses writes to read-only registers and reads beyond the map with ILLEGAL DATA ADDRESS", () => {
    const d = fenced();
    expect(d.device.write(FENCED.FENCE_TOKEN, [0, 0, 0, 99], 16, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(d.device.read(FENCED.MAP_END - 1, 2, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
  });

  it("refuses with SERVER DEVICE FAILURE and does not act when the EEPROM write fails", () => {
    const d = fenced();
    d.eeprom.failSaves = true;
    expect(d.send(1, 0, 40)).toEqual({ exception: EXCEPTION.SERVER_DEVICE_FAILURE });
    const s = d.device.snapshot(0);
    expect(s).toMatchObject({ lastRefusalReason: REFUSAL.PERSIST_FAILED, appliedCount: 0, fence: { token: 0 } });
    expect(s.status & STATUS.FAULT).toBe(STATUS.FAULT);
  });

  it("only ever accepts strictly increasing (token, seq), whatever the order of arrival", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 4 })), { maxLength: 30 }), (cmds) => {
        const d = fenced();
        cmds.forEach(([t, s], i) => d.send(t, s, i % 101));
        const applied = d.device.snapshot(0).applied;
        for (let i = 1; i < applied.length; i++) {
          const a = applied[i - 1]!;
          const b = applied[i]!;
          expect(a.token! < b.token! || (a.token === b.token && a.seq! < b.seq!)).toBe(true);
        }
      }),
    );
  });
});

describe("fenced profile 1.1: FENCE_RAISE", () => {
  const raise = (d: ReturnType<typeof fenced>, token: number, seq: number, now = 0) =>
    d.device.write(FENCED.FENCE_RAISE_START, encodeFenceRaise(token, seq), 16, now);

  it("raises the fence to a greater (token, seq) without moving: target, setpoint and applied count stay", () => {
    const d = fenced();
    d.send(5, 3, 42);
    expect(raise(d, 9, 0, 10)).toBeUndefined();
    expect(d.fence()).toMatchObject({ token: 9, seq: 0 });
    const snap = d.device.snapshot(10);
    expect(snap.targetPosition).toBe(42);
    expect(snap.appliedCount).toBe(1);
    expect(snap.applied).toHaveLength(1);
    expect(snap.raises).toEqual([{ token: 9, tokenText: "9", seq: 0, at: 10 }]);
    // Committed like a command block that carried the stored setpoint.
    expect(d.eeprom.data.get(1)).toMatchObject({ token: "9", seq: 0, target: 4200 });
    expect(decodeCommandBlock(d.read(FENCED.COMMAND_START, FENCED.COMMAND_COUNT))).toEqual({
      token: 9,
      seq: 0,
      setpoints: { position: 42 },
    });
  });

  it("from then on refuses the older token's writes with 0x46, and takes the newer token's", () => {
    const d = fenced();
    d.send(5, 3, 42);
    raise(d, 9, 0);
    expect(d.send(5, 4, 77)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
    expect(d.fence()).toMatchObject({ token: 9, lastRefusalReason: REFUSAL.STALE_TOKEN });
    expect(d.send(10, 0, 77)).toBeUndefined();
    expect(d.device.snapshot(0).targetPosition).toBe(77);
  });

  it("acknowledges an exact repeat, refuses a stale or conflicting raise with 0x46, token 0 with 0x03, a partial one with 0x02", () => {
    const d = fenced();
    d.send(5, 3, 42);
    raise(d, 9, 0);
    expect(raise(d, 9, 0)).toBeUndefined();
    expect(d.device.snapshot(0).raises).toHaveLength(1);
    expect(raise(d, 8, 5)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
    expect(d.fence().lastRefusalReason).toBe(REFUSAL.STALE_TOKEN);
    expect(d.send(9, 0, 50)).toEqual({ exception: FENCE_REFUSED_EXCEPTION }); // (9, 0) with another setpoint
    expect(d.fence().lastRefusalReason).toBe(REFUSAL.CONFLICT);
    expect(d.device.write(FENCED.FENCE_RAISE_START, [0, 0, 0, 0, 0, 1], 16, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_VALUE });
    expect(d.device.write(FENCED.FENCE_RAISE_START, [0, 0, 0, 12], 16, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(d.fence()).toMatchObject({ token: 9, seq: 0, lastRefusalReason: REFUSAL.PARTIAL_BLOCK });
  });

  it("does not leave safe state: a tripped watchdog keeps the actuator at its safe position", () => {
    const d = fenced({ watchdogMs: 1000, safePositionRaw: 0 });
    d.send(5, 3, 42, 0);
    expect(d.device.snapshot(1500).safeState).toBe(true);
    expect(raise(d, 9, 0, 1600)).toBeUndefined();
    const snap = d.device.snapshot(1600);
    expect(snap.safeState).toBe(true);
    expect(snap.targetPosition).toBe(0);
  });

  it("on a never-commanded device carries the stored setpoint, and survives a power cycle", () => {
    const d = fenced({ safePositionRaw: 1000 });
    expect(raise(d, 3, 0)).toBeUndefined();
    d.device.powerCycle(5);
    expect(d.fence()).toMatchObject({ token: 3, seq: 0 });
    expect(d.send(3, 0, 10)).toBeUndefined(); // the same block as the raise stored: a repeat
    expect(d.send(3, 0, 20)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
    expect(d.device.snapshot(5).appliedCount).toBe(0);
  });

  it("refuses a persist failure with 0x04 and keeps the old fence", () => {
    const d = fenced();
    d.send(5, 3, 42);
    d.eeprom.failSaves = true;
    expect(raise(d, 9, 0)).toEqual({ exception: EXCEPTION.SERVER_DEVICE_FAILURE });
    expect(d.fence()).toMatchObject({ token: 5, seq: 3, lastRefusalReason: REFUSAL.PERSIST_FAILED });
  });

  it("a 1.0 device says so in its identity and answers 0x02 to a raise", () => {
    const d = fenced({ profileVersion: PROFILE_VERSION_1_0 });
    expect(decodeIdentity(d.read(FENCED.IDENTITY_START, FENCED.IDENTITY_COUNT)).profileVersion).toBe(0x0100);
    expect(raise(d, 9, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(d.device.read(FENCED.FENCE_RAISE_START, 1, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(d.fence().token).toBe(0);
  });
});

describe("power loss", () => {
  it("keeps the fence and setpoint across a power cycle", () => {
    const d = fenced();
    d.send(9, 4, 30);
    d.device.powerCycle(1000);
    expect(d.fence()).toMatchObject({ token: 9, seq: 4, refusalCount: 0 });
    expect(d.send(9, 4, 30, 1000)).toBeUndefined(); // the retry after an unknown outcome: a duplicate
    expect(d.device.snapshot(1000).appliedCount).toBe(0);
    expect(d.send(9, 3, 30, 1000)).toEqual({ exception: FENCE_REFUSED_EXCEPTION });
  });

  it("survives power loss between storing and acting: on power-up it acts on the stored setpoint", () => {
    const d = fenced({ rateRawPerS: 0 });
    d.send(1, 0, 10);
    d.device.crashAfterPersist = 1;
    expect(() => d.send(2, 0, 80)).toThrow(/power loss/);
    d.device.powerCycle(5);
    const s = d.device.snapshot(5);
    expect(s.fence).toMatchObject({ token: 2, seq: 0 });
    expect(s.targetPosition).toBe(80);
    expect(d.send(2, 0, 80, 5)).toBeUndefined(); // the master's retry is a duplicate, not a second act
  });
});

describe("physical model and watchdog (fake clock)", () => {
  it("moves the actual position toward the target at the configured rate", () => {
    const d = fenced({ rateRawPerS: 1000 }); // 10 %/s
    d.send(1, 0, 50);
    let r = decodeReadback(d.read(FENCED.READBACK_START, FENCED.READBACK_COUNT, 2000)).readings;
    expect(r).toMatchObject({ targetPosition: 50, actualPosition: 20, moving: true });
    r = decodeReadback(d.read(FENCED.READBACK_START, FENCED.READBACK_COUNT, 6000)).readings;
    expect(r).toMatchObject({ actualPosition: 50, moving: false });
  });

  it("drives to the safe position and says so when neither command nor keep-alive arrives in time", () => {
    const d = fenced({ watchdogMs: 1000, safePositionRaw: 2500, rateRawPerS: 0 });
    d.send(1, 0, 90, 0);
    d.device.write(FENCED.KEEPALIVE, [1], 6, 900); // fed at 900: trips at 1900
    expect(d.device.snapshot(1899)).toMatchObject({ safeState: false, actualPosition: 90 });
    const s = d.device.snapshot(1900);
    expect(s).toMatchObject({ safeState: true, targetPosition: 25, actualPosition: 25, keepAlives: 1 });
    expect(s.status & STATUS.SAFE_STATE).toBe(STATUS.SAFE_STATE);
    // the fence stays; a keep-alive alone does not leave the safe state; a new command does
    d.device.write(FENCED.KEEPALIVE, [1], 6, 2000);
    expect(d.device.snapshot(2000).safeState).toBe(true);
    expect(d.send(1, 0, 90, 2000)).toBeUndefined(); // duplicate: acknowledged, not re-acted
    expect(d.device.snapshot(2000)).toMatchObject({ safeState: true, targetPosition: 25 });
    expect(d.send(1, 1, 90, 2100)).toBeUndefined();
    expect(d.device.snapshot(2100)).toMatchObject({ safeState: false, targetPosition: 90 });
  });

  it("trips at the exact expiry even when nobody reads for a long time, then travels at the rate", () => {
    const d = fenced({ watchdogMs: 500, safePositionRaw: 0, rateRawPerS: 1000 });
    d.send(1, 0, 50, 0); // reaches 50 % at 5000 ms... but the watchdog trips at 500 ms (5 %)
    expect(d.device.snapshot(1500)).toMatchObject({ safeState: true, actualPosition: 0 });
  });

  it("stays in safe state across a power cycle after the watchdog tripped, until a new command", () => {
    const d = fenced({ watchdogMs: 100, safePositionRaw: 500, rateRawPerS: 0 });
    d.send(1, 0, 90, 0);
    expect(d.device.snapshot(150).safeState).toBe(true);
    expect(d.eeprom.data.get(1)).toMatchObject({ token: "1", target: 9000, safe: true });
    d.device.powerCycle(200);
    expect(d.device.snapshot(200)).toMatchObject({ safeState: true, targetPosition: 5, actualPosition: 5 });
    expect(d.send(1, 1, 80, 210)).toBeUndefined();
    d.device.powerCycle(220);
    expect(d.device.snapshot(220)).toMatchObject({ safeState: false, targetPosition: 80 });
  });

  it("trips after power-up when no master ever talks to it", () => {
    const d = fenced({ watchdogMs: 100, safePositionRaw: 1000, rateRawPerS: 0 });
    expect(d.device.snapshot(100)).toMatchObject({ safeState: true, actualPosition: 10 });
  });
});

describe("plain profile", () => {
  it("takes a setpoint with FC06 at register 0 and reports position and status", () => {
    const device = new Device(config({ profile: "plain", rateRawPerS: 0 }), new MemoryEeprom(), 0);
    expect(device.write(PLAIN.TARGET_POSITION, [encodePlainSetpoint({ position: 42.5 })], 6, 0)).toBeUndefined();
    const regs = device.read(PLAIN.READ_START, PLAIN.READ_COUNT, 1);
    expect(Array.isArray(regs) && decodePlainReadings(regs)).toMatchObject({ targetPosition: 42.5, actualPosition: 42.5, moving: false });
    expect(device.write(PLAIN.ACTUAL_POSITION, [1], 6, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
    expect(device.write(PLAIN.TARGET_POSITION, [10001], 6, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_VALUE });
    expect(device.read(0, 4, 0)).toEqual({ exception: EXCEPTION.ILLEGAL_DATA_ADDRESS });
  });
});
