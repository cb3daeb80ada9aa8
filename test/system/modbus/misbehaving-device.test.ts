/**
 * The gateway's Modbus adapter (bus, port, device) against a misbehaving slave, over Modbus
 * TCP and over Modbus RTU on a real pty pair: every wrong answer is reported as what it is,
 * never as a value or an effect that did not happen.
 */
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FENCED, FENCE_REFUSED_EXCEPTION } from "../../../packages/protocol/src/modbus-profile.ts";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { ModbusBus, type BusLink } from "../../../src/adapters/modbus/bus.ts";
import { ModbusDevice, type DeviceOptions } from "../../../src/adapters/modbus/device.ts";
import type { PointConfig } from "../../../src/config/schema.ts";
import type { DeviceCommand } from "../../../src/shell/ports.ts";
import {
  MisbehavingSlave,
  byteCountField,
  dataBytes,
  echo,
  exception,
  f32Words,
  fencedIdentity,
  silence,
  truncate,
  wrongFunction,
  wrongTransactionId,
  wrongUnit,
} from "../../support/misbehaving-slave.ts";

const TIMEOUT_MS = 300;
const log = pino({ level: "silent" });

function point(p: Partial<PointConfig> & { register: number }): PointConfig {
  const type = p.type ?? "u16";
  return { table: "holding", type, wordOrder: "big", scale: 1, writable: false, min: 0, max: 65_535, ...p } as PointConfig;
}

/** A plain device: a setpoint at 0, a reading at 1, a 32-bit setpoint at 2..3. */
const PLAIN_POINTS = {
  position: point({ register: 0, scale: 0.01, min: 0, max: 100, writable: true }),
  actual: point({ register: 1, scale: 0.01, min: 0, max: 100 }),
  total: point({ register: 2, type: "u32", min: 0, max: 1_000_000, writable: true }),
};

/** A fenced device with three setpoints (four registers) in its command block, read back at 0x20.. */
const FENCED_POINTS = {
  speed: point({ register: 0x20, min: 0, max: 100, writable: true }),
  flow: point({ register: 0x21, type: "f32", min: 0, max: 50, writable: true }),
  limit: point({ register: 0x23, min: 0, max: 100, writable: true }),
  status: point({ register: 0x24 }),
};

let pty: PtyPair | undefined;
let slave: MisbehavingSlave | undefined;
let bus: ModbusBus | undefined;

beforeAll(async () => {
  pty = await createPtyPair();
});
afterAll(async () => {
  await pty?.close();
});
afterEach(async () => {
  await bus?.close();
  await slave?.close();
  bus = undefined;
  slave = undefined;
});

type Transport = "tcp" | "rtu";

async function rig(
  transport: Transport,
  device: Omit<DeviceOptions, "bus" | "unit"> & Record<string, unknown>,
): Promise<{ slave: MisbehavingSlave; device: ModbusDevice; bus: ModbusBus }> {
  let link: BusLink;
  if (transport === "tcp") {
    slave = await MisbehavingSlave.tcp();
    link = { kind: "tcp", host: slave.address!.host, port: slave.address!.port };
  } else {
    slave = await MisbehavingSlave.rtu(pty!.device);
    link = { kind: "rtu", line: { path: pty!.master, baudRate: 115_200, parity: "even", stopBits: 1, dataBits: 8 } };
  }
  bus = new ModbusBus(
    {
      name: "t",
      link,
      timeoutMs: TIMEOUT_MS,
      reopenMinMs: 20,
      reopenMaxMs: 100,
      quietAfterTimeoutMs: 20,
      offlineAfterFailures: 2,
      queueLimitPerUnit: 64,
    },
    log,
  );
  bus.addUnit(1);
  const up = new Promise<void>((resolve) => bus!.once("link", () => resolve()));
  bus.start();
  await up;
  return { slave, bus, device: new ModbusDevice({ bus, unit: 1, ...device } as DeviceOptions) };
}

function plainRig(transport: Transport, extra: Record<string, unknown> = {}) {
  return rig(transport, { profile: "plain", points: PLAIN_POINTS, ...extra });
}

async function fencedRig(transport: Transport) {
  const r = await rig(transport, { profile: "fenced", points: FENCED_POINTS });
  r.slave.set(FENCED.IDENTITY_START, fencedIdentity(4));
  return r;
}

let seq = 0;
const command = (set: Record<string, number>, token = 1): DeviceCommand => ({ holder: "h", token, seq: seq++, set });

/** What a rejected promise rejected with (fails if it resolved). */
async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected a rejection");
}

describe.each(["tcp", "rtu"] as const)("Modbus %s: exceptions", (transport) => {
  // 04 failed while acting, 05 accepted and still working, 0B the gateway's target did not
  // answer; 07 and 08 are only defined for programming and file functions; anything outside
  // the standard table (0x2A; 0x46 from a plain device) is unknown.
  it.each([0x04, 0x05, 0x0b, 0x07, 0x08, 0x2a, 0x46])(
    "a write the device applied and then answered exception %i is OUTCOME_UNKNOWN",
    async (code) => {
      const { slave, device } = await plainRig(transport);
      slave.fault({ fc: 16, apply: true, spoil: exception(code) });
      const outcome = await device.write(command({ position: 42.5 }));
      expect(outcome).toMatchObject({ kind: "failed", code: "OUTCOME_UNKNOWN", modbusCode: code });
      expect(slave.get(0)).toEqual([4250]); // it did act
    },
  );

  it.each([0x01, 0x02, 0x03, 0x06, 0x0a])("exception %i (not done) is DEVICE_ERROR", async (code) => {
    const { slave, device } = await plainRig(transport);
    slave.fault({ fc: 16, apply: false, spoil: exception(code) });
    const outcome = await device.write(command({ position: 42.5 }));
    expect(outcome).toMatchObject({ kind: "failed", code: "DEVICE_ERROR", modbusCode: code });
    expect(slave.get(0)).toEqual([0]);
  });

  it("exception 0x46 from a fenced device stays DEVICE_REJECTED", async () => {
    const { slave, device } = await fencedRig(transport);
    slave.fault({ fc: 16, apply: false, spoil: exception(FENCE_REFUSED_EXCEPTION) });
    expect(await device.write(command({ speed: 1, flow: 2, limit: 3 }))).toMatchObject({
      kind: "failed",
      code: "DEVICE_REJECTED",
      modbusCode: 0x46,
    });
  });
});

describe.each(["tcp", "rtu"] as const)("Modbus %s: framing", (transport) => {
  /** The bytes a correct answer to an FC16 has: TCP 7 + 5, RTU 6 + CRC. */
  const fc16Length = transport === "tcp" ? 12 : 8;

  it("one truncated FC16 answer is OUTCOME_UNKNOWN, and the next read and write are framed right", async () => {
    const { slave, device } = await plainRig(transport);
    slave.set(1, [1250]);
    slave.fault({ fc: 16, spoil: truncate(fc16Length - 3) });
    expect(await device.write(command({ position: 42.5 }))).toMatchObject({ kind: "failed", code: "OUTCOME_UNKNOWN" });
    expect(await device.read()).toEqual({ position: 42.5, actual: 12.5, total: 0 });
    expect(await device.write(command({ position: 10 }))).toEqual({ kind: "applied", applied: { position: 10 } });
    expect(await device.read()).toEqual({ position: 10, actual: 12.5, total: 0 });
  });

  it("an FC16 echo of another address is not taken for applied", async () => {
    const { slave, device } = await plainRig(transport);
    slave.fault({ fc: 16, spoil: echo({ address: 999 }) });
    expect(await device.write(command({ position: 42.5 }))).toMatchObject({ kind: "failed", code: "OUTCOME_UNKNOWN" });
    expect(await device.write(command({ position: 43 }))).toEqual({ kind: "applied", applied: { position: 43 } });
  });

  it("an FC16 echo of another quantity is not taken for applied", async () => {
    const { slave, device } = await plainRig(transport);
    slave.fault({ fc: 16, spoil: echo({ quantity: 1 }) });
    expect(await device.write(command({ total: 70_000 }))).toMatchObject({ kind: "failed", code: "OUTCOME_UNKNOWN" });
  });

  it("a short answer (2 data bytes for 4 registers) is an error, never zeros", async () => {
    const { slave, device } = await plainRig(transport);
    slave.set(0, [1000, 1250, 0, 7]);
    slave.fault({ fc: 3, spoil: dataBytes(2) });
    await rejection(device.read());
    expect(await device.read()).toEqual({ position: 10, actual: 12.5, total: 7 });
  });

  it("a long answer (12 data bytes for 4 registers) is an error", async () => {
    const { slave, device } = await plainRig(transport);
    slave.set(0, [1000, 1250, 0, 7]);
    slave.fault({ fc: 3, spoil: dataBytes(12) });
    await rejection(device.read());
    expect(await device.read()).toEqual({ position: 10, actual: 12.5, total: 7 });
  });

  it("a byte count that disagrees with the registers asked for is an error", async () => {
    const { slave, device } = await plainRig(transport);
    slave.set(0, [1000, 1250, 0, 7]);
    slave.fault({ fc: 3, spoil: byteCountField(2) });
    await rejection(device.read());
    expect(await device.read()).toEqual({ position: 10, actual: 12.5, total: 7 });
  });

  it("an answer from another unit is not taken", async () => {
    const { slave, device } = await plainRig(transport);
    slave.fault({ fc: 3, spoil: wrongUnit(7) });
    await rejection(device.read());
    expect(await device.read()).toMatchObject({ position: 0 });
  });

  it("an answer with another function code is not taken", async () => {
    const { slave, device } = await plainRig(transport);
    slave.fault({ fc: 3, spoil: wrongFunction(4) });
    await rejection(device.read());
    expect(await device.read()).toMatchObject({ position: 0 });
  });

  it("no answer at all: the next transaction is framed right", async () => {
    const { slave, device } = await plainRig(transport);
    slave.set(1, [1250]);
    slave.fault({ fc: 3, spoil: silence() });
    expect((await rejection(device.read())).message).toMatch(/timed out/i);
    expect(await device.read()).toMatchObject({ actual: 12.5 });
  });

  if (transport === "tcp") {
    it.each([1, -1])("an answer with the transaction id %s off is not taken", async (delta) => {
      const { slave, device } = await plainRig(transport);
      slave.set(1, [1250]);
      await device.read(); // an earlier transaction exists for the -1 case
      slave.fault({ fc: 3, spoil: wrongTransactionId(delta) });
      await rejection(device.read());
      expect(await device.read()).toMatchObject({ actual: 12.5 });
    });

    it("a malformed answer fails its transaction at once, not after the timeout", async () => {
      const { slave, device } = await plainRig(transport);
      slave.fault({ fc: 3, spoil: dataBytes(2) });
      const started = performance.now();
      const err = await rejection(device.read());
      expect(performance.now() - started).toBeLessThan(TIMEOUT_MS);
      expect(err.message).toMatch(/byte count 2.*8/);
    });
  }
});

describe.each(["tcp", "rtu"] as const)("Modbus %s: fenced command blocks", (transport) => {
  const BLOCK = FENCED.COMMAND_START;
  /** The setpoints (speed, flow, limit) of the last command block the slave received. */
  const lastBlock = (s: MisbehavingSlave) => {
    const regs = s.seen(16, BLOCK).at(-1)!.values.slice(6);
    const b = Buffer.alloc(4);
    b.writeUInt16BE(regs[1]!, 0);
    b.writeUInt16BE(regs[2]!, 2);
    return { speed: regs[0], flow: b.readFloatBE(0), limit: regs[3] };
  };

  it("never writes back a NaN or an out-of-range value read from the device", async () => {
    const { slave, device } = await fencedRig(transport);
    slave.set(0x21, f32Words(Number.NaN));
    slave.set(0x23, [60_000]);
    await device.read();
    const outcome = await device.write(command({ speed: 7 }));
    expect(outcome).toMatchObject({ kind: "failed", code: "DEVICE_ERROR" });
    expect((outcome as { message: string }).message).toMatch(/flow/);
    expect(slave.seen(16, BLOCK)).toEqual([]);
    // Given in the command, the values the device holds do not matter.
    expect(await device.write(command({ speed: 7, flow: 1.5, limit: 50 }))).toMatchObject({ kind: "applied" });
    expect(lastBlock(slave)).toEqual({ speed: 7, flow: 1.5, limit: 50 });
  });

  it("carries the setpoint an earlier command set, not the value of an older poll", async () => {
    const { slave, device } = await fencedRig(transport);
    await device.read(); // speed 0, flow 0, limit 0
    expect(await device.write(command({ speed: 70 }))).toMatchObject({ kind: "applied" });
    expect(await device.write(command({ limit: 30 }))).toMatchObject({ kind: "applied" });
    expect(lastBlock(slave)).toEqual({ speed: 70, flow: 0, limit: 30 });
  });

  it("reads a setpoint never read since start before the write, and never sends 0 for it", async () => {
    const { slave, device } = await fencedRig(transport);
    slave.set(0x21, f32Words(2.5));
    slave.set(0x23, [40]);
    expect(await device.write(command({ speed: 5 }))).toMatchObject({ kind: "applied", applied: { speed: 5 } });
    expect(lastBlock(slave)).toEqual({ speed: 5, flow: 2.5, limit: 40 });
    const reads = slave.requests.findIndex((r) => r.fc === 3 && r.address <= 0x21);
    const write = slave.requests.findIndex((r) => r.fc === 16 && r.address === BLOCK);
    expect(reads).toBeGreaterThanOrEqual(0);
    expect(reads).toBeLessThan(write);
  });

  it("after a block whose outcome is unknown, reads the setpoints it set again before the next block", async () => {
    const { slave, device } = await fencedRig(transport);
    await device.read();
    slave.fault({ fc: 16, apply: false, spoil: silence() });
    expect(await device.write(command({ speed: 70 }))).toMatchObject({ kind: "failed", code: "OUTCOME_UNKNOWN" });
    slave.set(0x20, [55]); // what the device really holds now
    expect(await device.write(command({ limit: 30 }))).toMatchObject({ kind: "applied" });
    expect(lastBlock(slave)).toEqual({ speed: 55, flow: 0, limit: 30 });
  });
});

describe.each(["tcp", "rtu"] as const)("Modbus %s: the fenced identity block", (transport) => {
  it("a generic device (no identity block) gets no keep-alive, no command block and no fence read", async () => {
    const { slave, device } = await rig(transport, { profile: "fenced", points: FENCED_POINTS });
    expect(await rejection(device.read())).toMatchObject({ name: "DeviceMismatchError", message: expect.stringMatching(/0x4647/) });
    expect(await rejection(device.readFence())).toMatchObject({ name: "DeviceMismatchError" });
    expect(await device.write(command({ speed: 1, flow: 1, limit: 1 }, 3))).toMatchObject({ kind: "failed", code: "DEVICE_UNAVAILABLE" });
    expect(slave.requests.filter((r) => r.fc === 6 || r.fc === 16)).toEqual([]);
  });

  it.each([
    ["profile 2", { profile: 2 }, /profile 2/],
    ["version 2.0", { version: 0x0200 }, /version 2\.0/],
    ["2 setpoint registers", { setpoints: 2 }, /2 setpoint registers.*4/],
  ] as const)("refuses a device whose identity block says %s", async (_what, overrides, message) => {
    const { slave, device } = await rig(transport, { profile: "fenced", points: FENCED_POINTS });
    slave.set(FENCED.IDENTITY_START, fencedIdentity(4, overrides));
    expect(await rejection(device.readFence())).toMatchObject({ name: "DeviceMismatchError", message: expect.stringMatching(message) });
    expect(slave.requests.filter((r) => r.fc === 6 || r.fc === 16)).toEqual([]);
  });

  it("a device that identifies right is used, and its identity is read again once it stopped answering", async () => {
    const { slave, device } = await fencedRig(transport);
    await device.read();
    expect(await device.readFence()).toEqual({ token: 0, seq: null });
    const identityReads = () => slave.seen(3, FENCED.IDENTITY_START).length;
    expect(identityReads()).toBe(1);
    // Two unanswered requests: the unit is offline; another device may be there when it answers.
    slave.fault({ spoil: silence(), times: 2 });
    await rejection(device.read());
    await rejection(device.read());
    slave.set(FENCED.IDENTITY_START, fencedIdentity(4, { magic: 0 }));
    await expect(device.read()).rejects.toMatchObject({ name: "DeviceMismatchError" });
    expect(identityReads()).toBe(2);
  });

  if (transport === "tcp") {
    it("reads the identity again after every reconnect", async () => {
      const { slave, device, bus } = await fencedRig(transport);
      await device.read();
      const reopened = new Promise<void>((resolve) => bus.on("link", (up) => up && resolve()));
      slave.dropConnections();
      await reopened;
      slave.set(FENCED.IDENTITY_START, fencedIdentity(4, { profile: 2 }));
      await expect(device.read()).rejects.toMatchObject({ name: "DeviceMismatchError" });
    });
  }
});

describe.each(["tcp", "rtu"] as const)("Modbus %s: the write function", (transport) => {
  it("writeFunction fc06 writes a single-register point with FC06 and a two-register one with FC16", async () => {
    const { slave, device } = await plainRig(transport, { writeFunction: "fc06" });
    slave.fault({ fc: 16, times: -1, apply: false, spoil: exception(0x01) }); // a device without FC16
    expect(await device.write(command({ position: 42.5 }))).toEqual({ kind: "applied", applied: { position: 42.5 } });
    expect(slave.seen(6, 0)).toHaveLength(1);
    expect(slave.get(0)).toEqual([4250]);
    expect(await device.write(command({ total: 70_000 }))).toMatchObject({ kind: "failed", code: "DEVICE_ERROR", modbusCode: 1 });
  });

  it("an FC06 echo of another value is not taken for applied", async () => {
    const { slave, device } = await plainRig(transport, { writeFunction: "fc06" });
    slave.fault({ fc: 6, spoil: echo({ quantity: 1 }) }); // FC06 echoes the value where FC16 echoes the quantity
    expect(await device.write(command({ position: 42.5 }))).toMatchObject({ kind: "failed", code: "OUTCOME_UNKNOWN" });
  });

  it("by default every write is FC16", async () => {
    const { slave, device } = await plainRig(transport);
    expect(await device.write(command({ position: 42.5 }))).toMatchObject({ kind: "applied" });
    expect(slave.seen(16, 0)).toHaveLength(1);
    expect(slave.seen(6)).toEqual([]);
  });
});
