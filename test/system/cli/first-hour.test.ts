/**
 * What a newcomer meets in the first hour, as subprocesses with their exit codes: a wrong
 * configuration through `npm start`, ports already taken, the daemon's log on a terminal
 * and under systemd, a fresh journal.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { prettyLine } from "../../../src/cli/pretty-log.ts";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { fencegateShellCommand, runFencegate, runTool, startProcess } from "../../support/processes.ts";
import { Teardown } from "../../support/stack.ts";

const ROOT = resolve(import.meta.dirname, "../../..");

let dir: string;
let broker: Broker;
let sim: SimulatorHandle;
/** A port this test holds open, so that whoever else wants it finds it taken. */
let taken: net.Server;
let takenPort: number;
/** Stops a daemon on a terminal that a failing test leaves running. */
const teardown = new Teardown();

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-first-hour-"));
  broker = await startMosquitto();
  sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], rate: 0 });
  taken = net.createServer().listen(0, "127.0.0.1");
  await new Promise((r) => taken.once("listening", r));
  takenPort = (taken.address() as net.AddressInfo).port;
});

afterAll(async () => {
  await teardown.run();
  taken?.close();
  await sim?.close();
  await broker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function writeYaml(name: string, config: unknown): string {
  const file = join(dir, name);
  writeFileSync(file, typeof config === "string" ? config : stringify(config));
  return file;
}

function setup(overrides: { busPort?: number; metricsPort?: number; journal?: string } = {}) {
  return gatewayConfig({
    brokerUrl: broker.url,
    journalPath: join(dir, overrides.journal ?? "journal.db"),
    buses: { sim: { type: "tcp", host: "127.0.0.1", port: overrides.busPort ?? sim.tcp!.port, timeoutMs: 1000 } },
    actuators: [valve("valve-1", "sim", 1)],
    ...(overrides.metricsPort !== undefined ? { metricsPort: overrides.metricsPort } : {}),
  });
}

describe("the first hour", () => {
  it("npm start with a wrong configuration: the daemon's messages, exit 78, no stack", async () => {
    const bad = writeYaml(
      "bad.yaml",
      "gatewayId: dev\nmqtt: { url: 'mqtt://127.0.0.1:1883' }\nbuses: { sim: { type: tcp, host: 127.0.0.1, port: 99999 } }\nactuators: []\n",
    );
    const started = await runTool("npm", ["start", "--silent", "--", "--config", bad], { cwd: ROOT, timeoutMs: 30_000 });
    expect(started.code).toBe(78);
    expect(started.stderr).toBe(
      `Configuration ${bad} has 2 problems:\n  - buses.sim.port (line 3): Must be a whole number from 1 to 65535.\n  - actuators (line 4): Define at least one actuator.\n`,
    );
  });

  it("fencegate start with the simulator's port taken: names buses.<name>.port, exit 78", async () => {
    const file = writeYaml("port-taken.yaml", setup({ busPort: takenPort, journal: "taken.db" }));
    const started = await runFencegate(["start", "--config", file], { cwd: ROOT, timeoutMs: 30_000 });
    expect(started.code).toBe(78);
    expect(started.stderr).toBe(
      `fencegate: port ${takenPort} on 127.0.0.1 (buses.sim.port, for the simulated actuator) is in use by another process: stop that process (another \`fencegate start\`?) or choose another buses.sim.port.\n`,
    );
  });

  it("the daemon with its metrics port taken: names metrics.port, exit 78", async () => {
    const daemon = DaemonProcess.start(mkdtempSync(join(dir, "metrics-")), setup({ metricsPort: takenPort, journal: "metrics.db" }));
    expect((await daemon.exited).code).toBe(78);
    expect(daemon.logs.find((l) => l.level === 60)).toMatchObject({
      setting: "metrics.port",
      port: takenPort,
      msg: expect.stringContaining("(metrics.port) is in use by another process"),
    });
  });

  it("announces a fresh journal as information, not as a warning", async () => {
    const daemon = DaemonProcess.start(mkdtempSync(join(dir, "fresh-")), setup({ journal: "fresh.db" }));
    try {
      const line = await daemon.waitForLog((l) => /journal/.test(l.msg ?? "") && /new journal created/.test(l.msg ?? ""));
      expect(line.level).toBe(30);
      await daemon.ready(["valve-1"]);
      expect(daemon.logs.filter((l) => l.level >= 40)).toEqual([]);
    } finally {
      await daemon.kill("SIGTERM");
    }
  });

  it("logs one readable line per entry on a terminal, JSON when stdout is not one", async () => {
    const file = writeYaml("tty.yaml", setup({ journal: "tty.db" }));
    // `script` gives the daemon a terminal as its stdout, as an operator's shell would.
    const child = startProcess(teardown, "script", ["-qfec", fencegateShellCommand(["daemon", "--config", file]), "/dev/null"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let output = "";
    child.stdout!.setEncoding("utf8").on("data", (s: string) => (output += s));
    try {
      await new Promise<void>((done, fail) => {
        const timer = setTimeout(() => fail(new Error(`no "MQTT connected" line: ${output}`)), 15_000);
        child.stdout!.on("data", () => /MQTT connected/.test(output) && (clearTimeout(timer), done()));
      });
    } finally {
      child.kill("SIGTERM");
    }
    const lines = output.split(/\r?\n/).filter((l) => l.includes("MQTT connected"));
    expect(lines[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO  MQTT connected {2}broker=\S+( \S+=\S+)*$/);
    // The same daemon with a pipe for stdout (systemd's journal is one) writes JSON.
    const piped = DaemonProcess.start(mkdtempSync(join(dir, "piped-")), setup({ journal: "piped.db" }));
    try {
      expect(await piped.waitForLog((l) => l.msg === "MQTT connected")).toMatchObject({ level: 30, time: expect.any(Number) });
    } finally {
      await piped.kill("SIGTERM");
    }
  });

  it("formats a decision with its actuator, holder and token; a non-JSON line passes", () => {
    const line = JSON.stringify({
      level: 40,
      time: Date.UTC(2026, 0, 2, 3, 4, 5, 6),
      pid: 1,
      hostname: "pi",
      msg: "command refused",
      actuator: "valve-1",
      holder: "line a",
      token: 3,
    });
    expect(prettyLine(line)).toBe('03:04:05.006 WARN  command refused  actuator=valve-1 holder="line a" token=3\n');
    expect(prettyLine("not json")).toBe("not json\n");
  });

  it("shows a logged error's message in the line and its stack under it", () => {
    const err = {
      type: "Error",
      message: "disk I/O error: caused by EIO",
      stack: "Error: disk I/O error\n    at commit (journal.ts:1:1)\ncaused by: Error: EIO\n    at write (fs.js:2:2)",
    };
    const line = JSON.stringify({ level: 60, time: Date.UTC(2026, 0, 2, 3, 4, 5, 6), msg: "the journal could not commit", err });
    expect(prettyLine(line)).toBe(
      '03:04:05.006 FATAL the journal could not commit  err="disk I/O error: caused by EIO"\n    at commit (journal.ts:1:1)\n    caused by: Error: EIO\n    at write (fs.js:2:2)\n',
    );
  });
});
