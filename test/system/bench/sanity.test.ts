/**
 * The gateway benchmark (npm run bench) still runs and its figures hang together: the
 * latency workload, for real (Mosquitto, the daemon process, a pty, the client library),
 * shortened to a few hundred commands. No timing is asserted: this machine's speed is not
 * the test's business, only that every figure is produced and consistent with the others.
 */
import { describe, expect, it } from "vitest";
import { defaultOptions, runBench, type Dist } from "../../../bench/gateway.ts";

function consistent(d: Dist, n?: number): void {
  if (n !== undefined) expect(d.n).toBe(n);
  for (const v of [d.p50, d.p99, d.p999, d.mean, d.max]) expect(Number.isFinite(v) && v > 0, JSON.stringify(d)).toBe(true);
  expect(d.p50).toBeLessThanOrEqual(d.p99);
  expect(d.p99).toBeLessThanOrEqual(d.p999);
  expect(d.p999).toBeLessThanOrEqual(d.max);
  expect(d.mean).toBeLessThanOrEqual(d.max);
}

describe("bench: latency workload", () => {
  it("produces floors, end-to-end percentiles and their ratios, all consistent", async () => {
    const options = {
      ...defaultOptions(true),
      only: ["latency"] as const,
      repeats: 1,
      latencyCommands: 300,
      floorSamples: 200,
      slowSyncMs: [],
      print: false,
      write: false,
      build: false,
    };
    const result = await runBench(options);
    const L = result.latency!;
    expect(L.repeats).toHaveLength(1);
    const r = L.repeats[0]!;
    consistent(r.endToEnd, 300);
    consistent(r.floors.mqtt, 200);
    consistent(r.floors.journal, 200);
    consistent(r.floors.modbus, 200);
    consistent(r.acquire, 20);
    // A command's floors are the broker and the bus (its audit record is asynchronous); an acquire's, the broker and the journal.
    expect(r.floorSumP50).toBeCloseTo(r.floors.mqtt.p50 + r.floors.modbus.p50, 9);
    expect(r.floorSumP99).toBeCloseTo(r.floors.mqtt.p99 + r.floors.modbus.p99, 9);
    expect(r.acquireFloorP50).toBeCloseTo(r.floors.mqtt.p50 + r.floors.journal.p50, 9);
    expect(r.ratioP50).toBeCloseTo(r.endToEnd.p50 / r.floorSumP50, 9);
    expect(r.ratioP99).toBeCloseTo(r.endToEnd.p99 / r.floorSumP99, 9);
    // A command goes through the broker and the bus: it cannot beat the faster of them.
    expect(r.endToEnd.p50).toBeGreaterThan(Math.min(r.floors.mqtt.p50, r.floors.modbus.p50));
    expect(r.commandsPerSecond).toBeGreaterThan(0);
    expect(r.daemonCpuMsPerCommand).toBeGreaterThan(0);
    expect(L.p50.median).toBe(r.endToEnd.p50);
    expect(L.pooled.n).toBe(300);
    expect(L.acquireP50.median).toBe(r.acquire.p50);
    expect(result.latencySlowDisk).toBeUndefined();
    expect(result.targets.map((t) => t.name)).toEqual(["command p50 / its floors' p50 sum", "command p99 / its floors' p99 sum"]);
    expect(result.machine.cpus).toBeGreaterThan(0);
  }, 60_000);
});
