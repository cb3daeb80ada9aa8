/** Shared by the firmware-bridge tests: a modbus-serial master and raw line access. */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import M from "modbus-serial";
import { InlineIoBinding, openSerialPort } from "../src/serial-port.ts";

const ModbusRTU = M.default;
export type Master = InstanceType<typeof ModbusRTU>;

export function tempDir(prefix = "fencegate-fw-"): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Generous, so a loaded machine does not turn a slow answer into a failed test. */
export const MASTER_TIMEOUT_MS = 1000;

/** modbus-serial as the RTU master on `device`, 115200 8E1, unit 1. */
export async function rtuMaster(device: string, unit = 1, timeoutMs = MASTER_TIMEOUT_MS): Promise<Master> {
  const client = new ModbusRTU();
  // modbus-serial hands these options to its SerialPort: a port free again once closed (serial-port.ts).
  await client.connectRTUBuffered(device, {
    baudRate: 115200,
    parity: "even",
    stopBits: 1,
    dataBits: 8,
    binding: InlineIoBinding,
  } as never);
  client.setID(unit);
  client.setTimeout(timeoutMs);
  return client;
}

export async function tcpMaster(port: number, unit = 1, timeoutMs = MASTER_TIMEOUT_MS): Promise<Master> {
  const client = new ModbusRTU();
  await client.connectTCP("127.0.0.1", { port });
  client.setID(unit);
  client.setTimeout(timeoutMs);
  return client;
}

export function closeMaster(client: Master): Promise<void> {
  return new Promise((resolve) => client.close(() => resolve()));
}

/** The error a modbus-serial call rejected with (fails the test if it resolved). */
export async function failure(p: Promise<unknown>): Promise<{ message: string; modbusCode?: number; errno?: string }> {
  try {
    await p;
  } catch (err) {
    return err as { message: string; modbusCode?: number; errno?: string };
  }
  throw new Error("expected the Modbus call to fail");
}

/** A call expected to time out, with a short master timeout; returns the error message. */
export async function timeoutOf(client: Master, call: () => Promise<unknown>, ms = 200): Promise<string> {
  client.setTimeout(ms);
  try {
    return (await failure(call())).message;
  } finally {
    client.setTimeout(MASTER_TIMEOUT_MS);
  }
}

/**
 * Opens `device` raw, writes `bytes`, collects what comes back until `expectBytes` arrived or
 * `waitMs` passed (expectBytes 0: wait the whole time, for "no answer").
 */
export async function rawExchange(device: string, bytes: Buffer, expectBytes: number, waitMs = 1000): Promise<Buffer> {
  const port = await openSerialPort({ path: device, baudRate: 115200, parity: "even" });
  const got: Buffer[] = [];
  port.on("data", (c: Buffer) => got.push(c));
  port.write(bytes);
  await waitUntil(() => expectBytes > 0 && Buffer.concat(got).length >= expectBytes, waitMs);
  await new Promise<void>((resolve) => port.close(() => resolve()));
  return Buffer.concat(got);
}

/** Polls `cond` every 5 ms until true or `ms` passed; returns its last value. */
export async function waitUntil(cond: () => boolean, ms: number): Promise<boolean> {
  const until = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > until) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
  return true;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
