/**
 * close() returns only once the serial port is free again: a bus closed while its port is
 * still opening must not keep the port's exclusive lock past close(), or whatever opens the
 * line next (a restarted bus, a test's next rig, `fencegate doctor`) fails with "Cannot lock
 * port". Seen as a flaky RTU test in the full suite before close() waited for the open.
 */
import { SerialPort } from "serialport";
import { pino } from "pino";
import { afterAll, beforeAll, it } from "vitest";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { ModbusBus } from "../../../src/adapters/modbus/bus.ts";

let pty: PtyPair;
beforeAll(async () => {
  pty = await createPtyPair();
});
afterAll(async () => {
  await pty.close();
});

function openLocked(path: string): Promise<SerialPort> {
  return new Promise((resolve, reject) => {
    const port = new SerialPort({ path, baudRate: 115_200, lock: true, autoOpen: false });
    port.open((err) => (err ? reject(err) : resolve(port)));
  });
}

it.each([0, 1, 2, 5])("a bus closed %i event-loop turns into its open leaves the port free when close() returns", async (turns) => {
  for (let round = 0; round < 10; round++) {
    const bus = new ModbusBus(
      {
        name: "t",
        link: { kind: "rtu", line: { path: pty.master, baudRate: 115_200, parity: "even", stopBits: 1, dataBits: 8 } },
        timeoutMs: 100,
        reopenMinMs: 20,
        reopenMaxMs: 100,
        quietAfterTimeoutMs: 20,
        offlineAfterFailures: 2,
        queueLimitPerUnit: 4,
      },
      pino({ level: "silent" }),
    );
    bus.start();
    for (let i = 0; i < turns; i++) await new Promise((r) => setImmediate(r));
    await bus.close();
    const port = await openLocked(pty.master);
    await new Promise<void>((resolve) => port.close(() => resolve()));
  }
});
