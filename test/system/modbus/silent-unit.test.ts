/**
 * A unit that has never answered since the bus opened (a miswired device, a wrong unit id) is
 * offline from the start, so no change of state reports it: the bus warns about it after the
 * first few unanswered requests, naming the bus, the unit and the timeout, and again at a
 * bounded rate while it stays silent. On a real pty RTU line, with a slave
 * that answers unit 1 and nothing else.
 */
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { ModbusBus, type ModbusClient } from "../../../src/adapters/modbus/bus.ts";
import { MisbehavingSlave } from "../../support/misbehaving-slave.ts";

const TIMEOUT_MS = 100;
const WARN_EVERY_MS = 1000;
const OFFLINE_AFTER = 2;
const ANSWERING = 1;
const SILENT = 7;

interface Line {
  readonly atMs: number;
  readonly entry: { level: number; msg: string; unit?: number; timeoutMs?: number; requests?: number };
}

let pty: PtyPair;
let slave: MisbehavingSlave;
let bus: ModbusBus;
const lines: Line[] = [];

beforeAll(async () => {
  pty = await createPtyPair();
  slave = await MisbehavingSlave.rtu(pty.device, { units: [ANSWERING] });
  const log = pino({ level: "warn" }, { write: (s: string) => void lines.push({ atMs: performance.now(), entry: JSON.parse(s) }) });
  bus = new ModbusBus(
    {
      name: "line-a",
      link: { kind: "rtu", line: { path: pty.master, baudRate: 115_200, parity: "even", stopBits: 1, dataBits: 8 } },
      timeoutMs: TIMEOUT_MS,
      reopenMinMs: 20,
      reopenMaxMs: 100,
      quietAfterTimeoutMs: 20,
      offlineAfterFailures: OFFLINE_AFTER,
      queueLimitPerUnit: 4,
      silentUnitWarnEveryMs: WARN_EVERY_MS,
    },
    log,
  );
  bus.addUnit(ANSWERING);
  bus.addUnit(SILENT);
  const up = new Promise<void>((resolve) => bus.once("link", () => resolve()));
  bus.start();
  await up;
});
afterAll(async () => {
  await bus?.close();
  await slave?.close();
  await pty?.close();
});

/** One register read of `unit`; whether it was answered. */
function read(unit: number): Promise<boolean> {
  const run = (c: ModbusClient) =>
    new Promise((resolve, reject) => c.writeFC3(unit, 0, 1, (err, data) => (err ? reject(err) : resolve(data))));
  return bus.transact(unit, "poll", run).then(
    () => true,
    () => false,
  );
}

const silentWarnings = () =>
  lines.filter((l) => l.entry.level === 40 && l.entry.unit === SILENT && /has not answered since the bus opened/.test(l.entry.msg));

describe("a unit that has never answered", () => {
  it("is warned about after the first few unanswered requests, with its bus, unit and timeout", async () => {
    expect(await read(ANSWERING)).toBe(true);
    for (let i = 1; i < OFFLINE_AFTER; i++) expect(await read(SILENT)).toBe(false);
    expect(silentWarnings()).toHaveLength(0);
    expect(await read(SILENT)).toBe(false);
    const [warning] = silentWarnings();
    expect(silentWarnings()).toHaveLength(1);
    expect(warning!.entry).toMatchObject({ unit: SILENT, timeoutMs: TIMEOUT_MS, requests: OFFLINE_AFTER });
    expect(warning!.entry.msg).toContain("unit 7 on bus line-a");
    expect(warning!.entry.msg).toContain(`${TIMEOUT_MS} ms`);
  });

  it("is warned about again while it stays silent, at most once per silentUnitWarnEveryMs", async () => {
    let reads = 0;
    while (silentWarnings().length < 2 && reads < 100) {
      expect(await read(SILENT)).toBe(false);
      reads++;
    }
    const [first, second] = silentWarnings();
    expect(second).toBeDefined();
    // Timestamps taken as each line is written, right after the bus's own clock reading: a ms of slack.
    expect(second!.atMs - first!.atMs).toBeGreaterThanOrEqual(WARN_EVERY_MS - 1);
    expect(reads).toBeGreaterThan(3); // not one line per request
    expect(second!.entry.requests).toBe(OFFLINE_AFTER + reads);
  });

  it("a unit that answers is not warned about", () => {
    expect(lines.filter((l) => l.entry.unit === ANSWERING)).toHaveLength(0);
  });
});
