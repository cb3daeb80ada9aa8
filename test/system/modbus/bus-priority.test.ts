/**
 * Commands ahead of polls on one RS-485 line, with real parts: the
 * gateway's Modbus adapter (bus, devices) on a real pty pair to the simulated fenced firmware
 * answering 8 units at line rate, every unit polled as the gateway polls it (identity once,
 * keep-alive, points) often enough to take about half the line. What is checked is the order
 * of frames as the simulator takes them off the line, never a duration.
 */
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { transactionLimitMs } from "../../../packages/protocol/src/rtu.ts";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { ModbusBus } from "../../../src/adapters/modbus/bus.ts";
import { ModbusDevice } from "../../../src/adapters/modbus/device.ts";
import { gatewayConfigSchema } from "../../../src/config/schema.ts";
import { gatewayConfig, valve } from "../../support/daemon.ts";
import { until } from "../../support/watch.ts";

const BAUD = 115_200;
const UNITS = [1, 2, 3, 4, 5, 6, 7, 8];
const TRIALS = 30;
/** A fenced poll: FC06 keep-alive (8 + 8 bytes) and FC03 of the 3 point registers (8 + 11 bytes). */
const POLL_LINE_MS = transactionLimitMs(8, 8, BAUD) + transactionLimitMs(8, 5 + 2 * 3, BAUD);
/** Each unit polled again this long after its last poll: a round of the 8 units' polls and the pause take about twice the polls' line time. */
const POLL_INTERVAL_MS = Math.round(UNITS.length * POLL_LINE_MS);

const log = pino({ level: "silent" });
const POLL_FUNCTIONS = new Set([3, 6]);

interface Frame {
  readonly unit: number;
  readonly fc: number;
}

let pty: PtyPair | undefined;
let sim: SimulatorHandle | undefined;
let bus: ModbusBus | undefined;
let stopped = false;
const frames: Frame[] = [];
/** Runs once on the next poll frame the simulator takes off the line, with that frame. */
let onPollFrame: ((frame: Frame) => void) | null = null;
const polling = new Map<number, Promise<unknown>>();
const loops: Promise<void>[] = [];
let devices: Map<number, ModbusDevice>;

/** Like the gateway's poll: a read of the device; a caller while one is in flight shares it. */
function poll(unit: number): Promise<unknown> {
  let p = polling.get(unit);
  if (p === undefined) {
    p = devices
      .get(unit)!
      .read()
      .catch(() => undefined)
      .finally(() => polling.delete(unit));
    polling.set(unit, p);
  }
  return p;
}

beforeAll(async () => {
  pty = await createPtyPair();
  sim = await startSimulator({
    serial: { path: pty.device, baud: BAUD },
    units: UNITS,
    lineRate: true,
    rate: 0,
    onRequest: (unit, fc) => {
      const frame = { unit, fc };
      frames.push(frame);
      if (POLL_FUNCTIONS.has(fc) && onPollFrame !== null) {
        const run = onPollFrame;
        onPollFrame = null;
        run(frame);
      }
    },
  });
  const config = gatewayConfigSchema.parse(
    gatewayConfig({
      brokerUrl: "mqtt://127.0.0.1:1883",
      journalPath: "unused.db",
      buses: { line: { type: "rtu", path: pty.master, baudRate: BAUD } },
      actuators: UNITS.map((u) => valve(`unit-${u}`, "line", u, "fenced", { pollIntervalMs: POLL_INTERVAL_MS })),
    }),
  );
  bus = new ModbusBus(
    {
      name: "line",
      link: { kind: "rtu", line: { path: pty.master, baudRate: BAUD, parity: "even", stopBits: 1, dataBits: 8 } },
      timeoutMs: 1000,
      reopenMinMs: 50,
      reopenMaxMs: 200,
      quietAfterTimeoutMs: 500,
      offlineAfterFailures: 3,
      queueLimitPerUnit: 16,
    },
    log,
  );
  for (const u of UNITS) bus.addUnit(u);
  const up = new Promise<void>((resolve) => bus!.once("link", () => resolve()));
  bus.start();
  await up;
  devices = new Map(
    config.actuators.map((a) => [a.unit, new ModbusDevice({ bus: bus!, unit: a.unit, profile: "fenced", points: a.points })]),
  );
  for (const a of config.actuators) {
    loops.push(
      (async () => {
        while (!stopped) {
          await poll(a.unit);
          await new Promise((r) => setTimeout(r, a.pollIntervalMs));
        }
      })(),
    );
  }
});

afterAll(async () => {
  stopped = true;
  onPollFrame = null;
  await bus?.close();
  await Promise.all(loops);
  await sim?.close();
  await pty?.close();
});

describe("a command on a line busy with polls", () => {
  it("is the next frame on the wire after the poll in progress, ahead of the 7 other units' polls waiting", async () => {
    // Every unit polled once: its identity is checked, so a command is one FC16.
    await until(() => UNITS.every((u) => sim!.device(u).keepAlives > 0) && polling.size === 0, {
      timeoutMs: 10_000,
      what: "every unit polled once",
    });
    for (let trial = 0; trial < TRIALS; trial++) {
      // The command goes to the unit whose poll is on the wire: round-robin alone would put it behind every other unit's.
      const issued = await new Promise<{ unit: number; at: number; written: Promise<unknown> }>((resolve) => {
        onPollFrame = (frame) => {
          for (const u of UNITS) if (u !== frame.unit) void poll(u);
          resolve({
            unit: frame.unit,
            at: frames.length,
            written: devices.get(frame.unit)!.write({ holder: "h", token: 1, seq: trial, set: { position: trial % 100 } }),
          });
        };
      });
      expect(await issued.written).toMatchObject({ kind: "applied" });
      const after = frames.slice(issued.at, issued.at + UNITS.length + 1);
      expect(after[0], `trial ${trial}: the frames after the command was issued were ${JSON.stringify(after)}`).toEqual({
        unit: issued.unit,
        fc: 16,
      });
    }
  });
});
