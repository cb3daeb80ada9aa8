/**
 * Round-trip latency of one Modbus transaction over a socat pty pair, modbus-serial master
 * → the simulator (in-process, RTU framing, CRC checked), and how close line-rate emulation
 * lands to the computed physical limit of a 115200-baud line.
 *
 *   npx tsx firmware-bridge/bench/pty-latency.ts [--n 1000] [--json]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import M from "modbus-serial";
import { FENCED, encodeCommandBlock } from "../../packages/protocol/src/modbus-profile.ts";
import { createPtyPair } from "../src/pty.ts";
import { transactionLimitMs } from "../../packages/protocol/src/rtu.ts";
import { startSimulator } from "../src/simulator.ts";

const ModbusRTU = M.default;
const { values } = parseArgs({ options: { n: { type: "string", default: "1000" }, json: { type: "boolean", default: false } } });
const N = Number(values.n);

interface Row {
  case: string;
  n: number;
  medianMs: number;
  p99Ms: number;
  maxMs: number;
  limitMs?: number;
}

function stats(name: string, samples: number[], limitMs?: number): Row {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
  return {
    case: name,
    n: s.length,
    medianMs: q(0.5),
    p99Ms: q(0.99),
    maxMs: s[s.length - 1] ?? Number.NaN,
    ...(limitMs ? { limitMs } : {}),
  };
}

async function measure(n: number, op: (i: number) => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 20; i++) await op(-1 - i); // warm-up
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await op(i);
    out.push(performance.now() - t0);
  }
  return out;
}

const rows: Row[] = [];
const pty = await createPtyPair();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-bench-"));
try {
  for (const scenario of [
    { name: "FC16 command block, EEPROM file (fsync per accept)", stateFile: path.join(dir, "eeprom.json"), lineRate: false },
    { name: "FC16 command block, EEPROM in RAM", stateFile: undefined, lineRate: false },
    { name: "FC16 command block, line-rate 115200", stateFile: undefined, lineRate: true },
  ]) {
    const sim = await startSimulator({
      serial: { path: pty.device, baud: 115200 },
      rate: 0,
      lineRate: scenario.lineRate,
      ...(scenario.stateFile ? { stateFile: scenario.stateFile } : {}),
    });
    const client = new ModbusRTU();
    await client.connectRTUBuffered(pty.master, { baudRate: 115200, parity: "even", stopBits: 1, dataBits: 8 });
    client.setID(1);
    client.setTimeout(1000);
    let seq = 0;
    const fc16 = await measure(N, () =>
      client.writeRegisters(FENCED.COMMAND_START, encodeCommandBlock({ token: 1, seq: seq++, setpoints: { position: seq % 100 } })),
    );
    rows.push(stats(scenario.name, fc16, scenario.lineRate ? transactionLimitMs(9 + 2 * FENCED.COMMAND_COUNT, 8, 115200) : undefined));
    if (!scenario.stateFile) {
      const fc06 = await measure(N, () => client.writeRegister(FENCED.KEEPALIVE, 1));
      rows.push(
        stats(
          `FC06 keep-alive${scenario.lineRate ? ", line-rate 115200" : ""}`,
          fc06,
          scenario.lineRate ? transactionLimitMs(8, 8, 115200) : undefined,
        ),
      );
      const fc03 = await measure(N, () => client.readHoldingRegisters(FENCED.READBACK_START, FENCED.READBACK_COUNT));
      rows.push(
        stats(
          `FC03 read-back (21 regs)${scenario.lineRate ? ", line-rate 115200" : ""}`,
          fc03,
          scenario.lineRate ? transactionLimitMs(8, 5 + 2 * FENCED.READBACK_COUNT, 115200) : undefined,
        ),
      );
    }
    await new Promise<void>((r) => client.close(() => r()));
    await sim.close();
  }
} finally {
  await pty.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

if (values.json) console.log(JSON.stringify({ node: process.version, cpus: os.cpus().length, rows }, null, 1));
else {
  const f = (x: number | undefined) => (x === undefined ? "" : x.toFixed(3));
  console.log(`node ${process.version}, ${os.cpus().length} CPUs, n=${N} per case`);
  console.log(["case".padEnd(52), "median", "  p99", "   max", " limit", " median-limit"].join("\t"));
  for (const r of rows) {
    console.log(
      [r.case.padEnd(52), f(r.medianMs), f(r.p99Ms), f(r.maxMs), f(r.limitMs), r.limitMs ? f(r.medianMs - r.limitMs) : ""].join("\t"),
    );
  }
}
