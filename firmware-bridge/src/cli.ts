/**
 * `fencegate sim`: run the simulated actuator on a serial device (Modbus RTU) or TCP.
 * Prints one JSON line `{"ready":true,...}` on stdout when it answers; SIGTERM/SIGINT close it.
 */
import { parseArgs } from "node:util";
import { startSimulator } from "./simulator.ts";
import type { Parity, SimulatorOptions } from "./simulator.ts";

export const USAGE = `usage: fencegate sim (--serial DEV | --tcp HOST:PORT) [options]

Runs a simulated Modbus actuator (see firmware-bridge/README.md for the register map).

  --serial DEV          Modbus RTU on a serial device (e.g. one end of a socat pty pair)
  --tcp HOST:PORT       Modbus TCP server (PORT 0: pick a free port, printed in the ready line)
  --unit LIST           unit ids answered, e.g. 1 or 1,2,3 (default 1); each unit has its own state
  --profile P           fenced (default) | plain
  --profile-version V   fenced profile 1.1 (default) | 1.0 (no FENCE_RAISE block)
  --state FILE          EEPROM file: one JSON file holding every unit's fence and setpoint,
                        replaced atomically (temp + fsync + rename + fsync dir). Default: RAM only
  --lose-unsynced       test mode: saves stay in RAM until a "sync" control command; a power
                        cycle loses them
  --baud N              serial speed (default 115200); also the line-rate baud for TCP
  --parity P            even (default) | none | odd
  --stop-bits N         1 (default) | 2
  --watchdog-ms N       communications-loss watchdog, 0..65535 ms (default 0 = off)
  --safe-position PCT   position the watchdog drives to, 0..100 (default 0)
  --rate PCT_PER_S      travel rate in %/s (default 20; 0 = instantaneous)
  --line-rate           time responses like a real RTU line at --baud
  --silence-ms N        RTU inter-frame silence (default max(t3.5, 3 ms))
  --control PATH        JSON-lines control socket for fault injection (see README)
  --help                this text
`;

function num(name: string, v: string | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new Error(`--${name}: not a number: ${v}`);
  return n;
}

export function parseSimArgs(argv: string[]): SimulatorOptions | "help" {
  const { values, positionals } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: true,
    options: {
      serial: { type: "string" },
      tcp: { type: "string" },
      unit: { type: "string", default: "1" },
      profile: { type: "string", default: "fenced" },
      "profile-version": { type: "string", default: "1.1" },
      state: { type: "string" },
      "lose-unsynced": { type: "boolean", default: false },
      baud: { type: "string" },
      parity: { type: "string", default: "even" },
      "stop-bits": { type: "string", default: "1" },
      "watchdog-ms": { type: "string" },
      "safe-position": { type: "string" },
      rate: { type: "string" },
      "line-rate": { type: "boolean", default: false },
      "silence-ms": { type: "string" },
      control: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) return "help";
  if (positionals.length > 0) throw new Error(`unexpected argument: ${positionals[0]}`);
  if (!values.serial === !values.tcp) throw new Error("give exactly one of --serial DEV, --tcp HOST:PORT");
  const units = values.unit.split(",").map((u) => num("unit", u, 1));
  if (values.profile !== "fenced" && values.profile !== "plain") throw new Error(`--profile: fenced or plain, not ${values.profile}`);
  const profileVersion = values["profile-version"];
  if (profileVersion !== "1.0" && profileVersion !== "1.1") throw new Error(`--profile-version: 1.0 or 1.1, not ${profileVersion}`);
  if (!["even", "none", "odd"].includes(values.parity)) throw new Error(`--parity: even, none or odd, not ${values.parity}`);
  const stopBits = num("stop-bits", values["stop-bits"], 1);
  if (stopBits !== 1 && stopBits !== 2) throw new Error("--stop-bits: 1 or 2");
  const baud = num("baud", values.baud, 115200);
  let tcp: SimulatorOptions["tcp"];
  if (values.tcp !== undefined) {
    const m = /^(.*):(\d+)$/.exec(values.tcp);
    if (!m || m[1] === undefined || m[2] === undefined) throw new Error(`--tcp: HOST:PORT, not ${values.tcp}`);
    tcp = { host: m[1] === "" ? "127.0.0.1" : m[1], port: Number(m[2]) };
  }
  const silence = values["silence-ms"] === undefined ? undefined : num("silence-ms", values["silence-ms"], 3);
  return {
    ...(values.serial !== undefined ? { serial: { path: values.serial, baud, parity: values.parity as Parity, stopBits } } : {}),
    ...(tcp ? { tcp } : {}),
    units,
    profile: values.profile,
    profileVersion,
    ...(values.state !== undefined ? { stateFile: values.state } : {}),
    loseUnsynced: values["lose-unsynced"],
    baud,
    watchdogMs: num("watchdog-ms", values["watchdog-ms"], 0),
    safePosition: num("safe-position", values["safe-position"], 0),
    rate: num("rate", values.rate, 20),
    lineRate: values["line-rate"],
    ...(silence !== undefined ? { silenceMs: silence } : {}),
    ...(values.control !== undefined ? { control: values.control } : {}),
  };
}

export async function main(argv: string[]): Promise<number> {
  let options: SimulatorOptions | "help";
  try {
    options = parseSimArgs(argv);
  } catch (err) {
    console.error(`fencegate sim: ${(err as Error).message}\n\n${USAGE}`);
    return 64;
  }
  if (options === "help") {
    console.log(USAGE);
    return 0;
  }
  let sim;
  try {
    sim = await startSimulator(options);
  } catch (err) {
    console.error(`fencegate sim: ${(err as Error).message}`);
    return 69;
  }
  console.log(
    JSON.stringify({
      ready: true,
      pid: process.pid,
      profile: sim.profile,
      units: sim.units,
      serial: sim.serial ?? null,
      tcp: sim.tcp ?? null,
      control: options.control ?? null,
      state: options.stateFile ?? null,
    }),
  );
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once("SIGTERM", () => resolve("SIGTERM"));
    process.once("SIGINT", () => resolve("SIGINT"));
  });
  await sim.close();
  console.error(`fencegate sim: closed on ${signal}`);
  return 0;
}
