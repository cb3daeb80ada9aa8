/**
 * The README's examples, executed: every `console` block preceded by
 * `<!-- readme-test -->` runs in order, as one session, against a private Mosquitto, the
 * real daemon on config/embedded.yaml's actuator and the simulated valve. `$ ` lines are
 * commands (run by bash in the checkout, so `npx fencegate` is its CLI); the lines after them are
 * the expected output, where a line ending in `...` only has to match its beginning.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { brokerAddress } from "fencegate-client";
import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { startSimulator, type SimulatorHandle } from "../../firmware-bridge/src/simulator.ts";
import { DaemonProcess } from "../support/daemon.ts";
import { startMosquitto, type Broker } from "../support/mosquitto.ts";
import { runTool } from "../support/processes.ts";

const ROOT = resolve(import.meta.dirname, "../..");

interface Step {
  readonly command: string;
  readonly expected: string[];
}

export function readmeSteps(markdown: string): Step[] {
  const steps: Step[] = [];
  const blocks = markdown.split("<!-- readme-test -->").slice(1);
  for (const block of blocks) {
    const body = /^\s*```console\n([\s\S]*?)\n```/.exec(block)?.[1];
    if (body === undefined) throw new Error("a readme-test marker must be followed by a console block");
    for (const line of body.split("\n")) {
      if (line.startsWith("$ ")) steps.push({ command: line.slice(2), expected: [] });
      else steps.at(-1)?.expected.push(line);
    }
  }
  return steps;
}

function matches(actual: string, expected: string): boolean {
  return expected.endsWith("...") ? actual.startsWith(expected.slice(0, -3)) : actual === expected;
}

let dir: string;
let broker: Broker;
let sim: SimulatorHandle;
let daemon: DaemonProcess;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-readme-"));
  broker = await startMosquitto();
  sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], rate: 0 });
  const embedded = parse(readFileSync(join(ROOT, "config/embedded.yaml"), "utf8"));
  const configFor = (metricsPort: number) => ({
    ...embedded,
    mqtt: { ...embedded.mqtt, url: broker.url },
    buses: { sim: { ...embedded.buses.sim, port: sim.tcp!.port } },
    journal: { ...embedded.journal, path: join(dir, "journal.db") },
    metrics: { ...embedded.metrics, port: metricsPort }, // 9464 may be taken on a shared machine
  });
  ({ daemon } = await DaemonProcess.startOnFreeMetricsPort(dir, configFor));
  await daemon.ready(["valve-1"]);
  // The README's first command shows the polled points: wait for them to be published.
  const watcher = await mqtt.connectAsync(brokerAddress(broker.url));
  await new Promise<void>((done) => {
    watcher.on("message", (_t, payload) => {
      const state = JSON.parse(payload.toString());
      if (state.online && "position" in state.points) done();
    });
    void watcher.subscribeAsync("fencegate/valve-1/state");
  });
  await watcher.endAsync();
});

afterAll(async () => {
  await daemon?.kill("SIGTERM");
  await sim?.close();
  await broker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("README examples", () => {
  const steps = readmeSteps(readFileSync(join(ROOT, "README.md"), "utf8"));

  it("has examples to run", () => {
    expect(steps.length).toBeGreaterThanOrEqual(10);
  });

  it("every example prints what the README says, in order", async () => {
    for (const step of steps) {
      const command = step.command.replaceAll("-p 1883", `-p ${broker.port}`);
      // Asynchronous: the simulated valve lives in this process and must keep answering.
      const run = await runTool(
        "bash",
        [
          "-c",
          `{ ${command}
} 2>&1`,
        ],
        {
          cwd: ROOT,
          // npx runs bin/fencegate.mjs with the node first on PATH: this test's own.
          env: { PATH: `${dirname(process.execPath)}:${process.env.PATH}`, FENCEGATE_BROKER: broker.url },
          timeoutMs: 20_000,
        },
      );
      if (run.code !== 0)
        throw new Error(`README command failed: ${step.command}\n${run.stdout}${run.error ? `\n${run.error.message}` : ""}`);
      const output = run.stdout;
      const lines = output.replace(/\n$/, "").split("\n");
      const ok = lines.length === step.expected.length && lines.every((line, i) => matches(line, step.expected[i]!));
      expect(ok, `$ ${step.command}\n--- README says:\n${step.expected.join("\n")}\n--- got:\n${output}`).toBe(true);
    }
  });
});
