/**
 * Prometheus metrics, /healthz and the status page (status-routes.ts) on one HTTP port. Counters are fed from the events
 * the shell publishes and from the buses; gauges are read from the shell when scraped.
 */
import http from "node:http";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { CoreEvent } from "../../core/types.ts";
import { challenge, isAuthorized, type HttpAuth } from "./auth.ts";
import { limitConnections } from "./connections.ts";
import { allowedHostNames, hostAllowed } from "./host-check.ts";
import type { StatusRoutes } from "./status-routes.ts";

export interface HealthSource {
  /** null when healthy; otherwise the sentence that says why not. */
  problem(): string | null;
  details(): Record<string, unknown>;
  queueDepths(): Iterable<[actuator: string, depth: number]>;
  linkStates(): Iterable<[actuator: string, online: boolean]>;
  pointFaults(): Iterable<[actuator: string, faults: number]>;
  /** The journal's backlog: records not yet durable (the asynchronous audit trail, and grants on their way), the oldest's age, and the commits made. */
  journalLag(): { readonly records: number; readonly oldestMs: number; readonly commits: number };
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
  private readonly busUp = new Gauge({
    name: "fencegate_bus_up",
    help: "1 while the bus (serial port or TCP link) is open.",
    labelNames: ["bus"] as const,
    registers: [this.registry],
  });
  private readonly refusedAtDoor = new Counter({
    name: "fencegate_requests_refused_at_door_total",
    help: "Requests the MQTT link refused (OVERLOADED over a requester's budget, INVALID_REQUEST, RETAINED_REQUEST) or dropped unanswerable (TOO_LARGE, NOT_JSON, NO_ID, ...) before the core, by code: the core's refusals are in fencegate_decisions_total.",
    labelNames: ["code"] as const,
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
    new Gauge({
      name: "fencegate_journal_lag_records",
      help: "Journal records handed over and not yet durable: commands' audit records waiting for their background commit (at most journal.auditLagMs / auditLagRecords), and grants on their way.",
      registers: [this.registry],
      collect() {
        this.set(source.journalLag().records);
      },
    });
    new Gauge({
      name: "fencegate_journal_lag_oldest_ms",
      help: "Age of the oldest journal record not yet durable, in milliseconds (0: none waiting). What a crash now could lose of the audit trail.",
      registers: [this.registry],
      collect() {
        this.set(Math.round(source.journalLag().oldestMs));
      },
    });
    new Counter({
      name: "fencegate_journal_commits_total",
      help: "Journal commits made durable (each one fdatasync, carrying grants and audit records together).",
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(source.journalLag().commits);
      },
    });
  }

  onEvent(actuator: string, event: CoreEvent): void {
    this.decisions.inc({ actuator, type: event.type, code: event.code ?? "" });
  }

  /** Labelled by code only: the actuator level of a refused request's topic is the sender's to choose. */
  onRefusedAtDoor(code: string): void {
    this.refusedAtDoor.inc({ code });
  }

  onTransaction(bus: string, seconds: number, result: string): void {
    this.transactionSeconds.observe({ bus, result }, seconds);
  }

  onBus(bus: string, up: boolean): void {
    this.busUp.set({ bus }, up ? 1 : 0);
  }
}

export interface HttpOptions {
  /** The status page's routes (status-routes.ts), or null when it is off. */
  readonly status?: StatusRoutes | null;
  /** Credentials every request must carry, or null (loopback only: the configuration enforces it). */
  readonly auth?: HttpAuth | null;
  /** The most connections at once (event streams included); beyond, the oldest idle one is closed (connections.ts). */
  readonly maxConnections?: number;
  /** `Host` names answered besides IP addresses, loopback names and the listening host (metrics.hostNames): host-check.ts. */
  readonly hostNames?: readonly string[];
}

/** From the connection (or, kept alive, a request's first byte) to the end of its headers, at most. */
export const HEADERS_TIMEOUT_MS = 5_000;
const CONNECTIONS_CHECK_MS = 1_000;

/** Longer request targets are refused (414) before anything is parsed. */
const MAX_URL_CHARS = 2048;

/**
 * Serves /metrics, /healthz and, when given, the status page. Resolves once listening;
 * `close()` stops it. A port in use or an address that is not this machine's rejects with a
 * sentence saying what to change.
 */
export async function serveHttp(
  host: string,
  port: number,
  metrics: GatewayMetrics,
  health: HealthSource,
  options: HttpOptions = {},
): Promise<http.Server> {
  const status = options.status ?? null;
  const hostNames = allowedHostNames(host, options.hostNames ?? []);
  // The headers timeout (from the connection to the end of the headers, a connection that
  // sends nothing included) is checked every second, not every 30 s (Node's default): an
  // idle connection held its place 30 to 40 s.
  const server = http.createServer(
    { connectionsCheckingInterval: CONNECTIONS_CHECK_MS, headersTimeout: HEADERS_TIMEOUT_MS },
    (req, res) => {
      if (!hostAllowed(req.headers.host, hostNames)) {
        res
          .writeHead(421, { "content-type": "text/plain; charset=utf-8" })
          .end(
            "This gateway does not answer for that host name (DNS rebinding is refused): use its address, localhost, or a name listed in metrics.hostNames.\n",
          );
        return;
      }
      if (req.method !== "GET") {
        res.writeHead(405, { allow: "GET" }).end();
        return;
      }
      const target = req.url ?? "/";
      if (target.length > MAX_URL_CHARS) {
        res
          .writeHead(414, { "content-type": "text/plain; charset=utf-8" })
          .end(`The request target is longer than ${MAX_URL_CHARS} characters.\n`);
        return;
      }
      if (!isAuthorized(req, options.auth ?? null)) return challenge(res);
      let url: URL;
      try {
        url = new URL(target, "http://gateway");
      } catch {
        res.writeHead(400, { "content-type": "text/plain; charset=utf-8" }).end("The request target is not a valid path.\n");
        return;
      }
      if (url.pathname === "/metrics") {
        metrics.registry.metrics().then(
          (text) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(text),
          (err: unknown) => res.writeHead(500).end(String(err)),
        );
        return;
      }
      if (url.pathname === "/healthz") {
        const problem = health.problem();
        res
          .writeHead(problem === null ? 200 : 503, { "content-type": "application/json" })
          .end(JSON.stringify({ ok: problem === null, problem, ...health.details() }));
        return;
      }
      if (status?.handle(req, res, url)) return;
      res
        .writeHead(404, { "content-type": "text/plain; charset=utf-8" })
        .end(status ? "Not found: the status page is at /.\n" : "Not found: this port serves /metrics and /healthz.\n");
    },
  );
  // Slow or idle clients cannot hold sockets for long, nor keep others out (connections.ts);
  // event streams are long by design (they are bounded by count in status-routes.ts) and
  // the request timeout does not apply to them.
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  const maxConnections = options.maxConnections ?? 256;
  limitConnections(server, { maxConnections, maxPerAddress: Math.max(1, Math.floor(maxConnections / 2)) });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => reject(listenError(host, port, err)));
    server.listen(port, host, () => resolve());
  });
  return server;
}

/** The HTTP listener could not open: `setting` names the configuration key to change. */
export class HttpListenError extends Error {
  override readonly name = "HttpListenError";
  constructor(
    readonly setting: "metrics.port" | "metrics.host",
    message: string,
  ) {
    super(message);
  }
}

function listenError(host: string, port: number, err: NodeJS.ErrnoException): Error {
  switch (err.code) {
    case "EADDRINUSE":
      return new HttpListenError(
        "metrics.port",
        `port ${port} on ${host} (metrics.port) is in use by another process: stop it, or choose another metrics.port (or metrics.enabled: false).`,
      );
    case "EADDRNOTAVAIL":
    case "ENOTFOUND":
      return new HttpListenError(
        "metrics.host",
        `${host} is not an address of this machine (metrics.host): use 127.0.0.1, or one of this machine's addresses.`,
      );
    case "EACCES":
      return new HttpListenError("metrics.port", `port ${port} needs privileges this user lacks (metrics.port): use a port above 1023.`);
    default:
      return new Error(`The HTTP port ${host}:${port} could not be opened: ${err.message}.`);
  }
}
