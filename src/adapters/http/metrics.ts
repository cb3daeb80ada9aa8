/**
 * Prometheus metrics and /healthz on a local HTTP port. Counters are fed from the events
 * the shell publishes and from the buses; gauges are read from the shell when scraped.
 */
import http from "node:http";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { CoreEvent } from "../../core/types.ts";

export interface HealthSource {
  /** null when healthy; otherwise the sentence that says why not. */
  problem(): string | null;
  details(): Record<string, unknown>;
  queueDepths(): Iterable<[actuator: string, depth: number]>;
  linkStates(): Iterable<[actuator: string, online: boolean]>;
  pointFaults(): Iterable<[actuator: string, faults: number]>;
}

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly decisions = new Counter({
    name: "fencegate_decisions_total",
    help: "Decisions by actuator, event type (granted, accepted, rejected, applied, outcome-unknown, ...) and error code.",
    labelNames: ["actuator", "type", "code"] as const,
    registers: [this.registry],
  });
  private readonly transactionSeconds = new Histogram({
    name: "fencegate_modbus_transaction_seconds",
    help: "Modbus transaction latency by bus and result (ok, exception, timeout, malformed, error).",
    labelNames: ["bus", "result"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });
  private readonly busUp = new Gauge({ name: "fencegate_bus_up", help: "1 while the bus (serial port or TCP link) is open.", labelNames: ["bus"] as const, registers: [this.registry] });
  readonly unanswerable = new Counter({
    name: "fencegate_requests_unanswerable_total",
    help: "Requests dropped without a reply because neither id nor reply route could be read.",
    labelNames: ["cause"] as const,
    registers: [this.registry],
  });

  constructor(source: HealthSource) {
    collectDefaultMetrics({ register: this.registry, prefix: "fencegate_process_" });
    new Gauge({
      name: "fencegate_queue_depth",
      help: "Commands waiting per actuator (not counting the one at the device).",
      labelNames: ["actuator"] as const,
      registers: [this.registry],
      collect() {
        for (const [actuator, depth] of source.queueDepths()) this.set({ actuator }, depth);
      },
    });
    new Gauge({
      name: "fencegate_actuator_online",
      help: "1 while the actuator answers on its bus.",
      labelNames: ["actuator"] as const,
      registers: [this.registry],
      collect() {
        for (const [actuator, online] of source.linkStates()) this.set({ actuator }, online ? 1 : 0);
      },
    });
    new Gauge({
      name: "fencegate_point_faults",
      help: "Points of the actuator whose last reading is not a finite number (NaN, infinite): in the state's pointFaults, never published as a value.",
      labelNames: ["actuator"] as const,
      registers: [this.registry],
      collect() {
        for (const [actuator, faults] of source.pointFaults()) this.set({ actuator }, faults);
      },
    });
  }

  onEvent(actuator: string, event: CoreEvent): void {
    this.decisions.inc({ actuator, type: event.type, code: event.code ?? "" });
  }

  onTransaction(bus: string, seconds: number, result: string): void {
    this.transactionSeconds.observe({ bus, result }, seconds);
  }

  onBus(bus: string, up: boolean): void {
    this.busUp.set({ bus }, up ? 1 : 0);
  }
}

/** Serves /metrics and /healthz. Resolves once listening; `close()` stops it. */
export async function serveHttp(host: string, port: number, metrics: GatewayMetrics, health: HealthSource): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== "GET") {
      res.writeHead(405).end();
      return;
    }
    if (req.url === "/metrics") {
      metrics.registry.metrics().then(
        (text) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500).end(String(err)),
      );
      return;
    }
    if (req.url === "/healthz") {
      const problem = health.problem();
      res.writeHead(problem === null ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify({ ok: problem === null, problem, ...health.details() }));
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
