/**
 * The HTTP side, when `metrics.enabled`: Prometheus metrics, /healthz, and the status page
 * with its board (fed from the outbox, the journal's durable records and the buses).
 */
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import { join } from "node:path";
import type { Logger } from "pino";
import type { EtcdGroupMember } from "../adapters/etcd/member.ts";
import type { HttpAuth } from "../adapters/http/auth.ts";
import { GatewayMetrics, serveHttp, type HealthSource } from "../adapters/http/metrics.ts";
import { StatusBoard, type ActuatorInfo } from "../adapters/http/status-board.ts";
import { StatusRoutes } from "../adapters/http/status-routes.ts";
import { AuditReader } from "../adapters/journal/audit.ts";
import type { JournalThread } from "../adapters/journal/worker-client.ts";
import type { ModbusBus } from "../adapters/modbus/bus.ts";
import type { MqttLink } from "../adapters/mqtt/link.ts";
import { realClock } from "../adapters/platform.ts";
import { isLoopbackHost, type GatewayConfig } from "../config/schema.ts";
import { PACKAGE_ROOT } from "../package-root.ts";
import type { Gateway } from "../shell/gateway.ts";
import type { PublishingOutbox } from "../shell/outbox.ts";
import { journalLag } from "./health.ts";

export interface HttpParts {
  readonly health: HealthSource;
  readonly gateway: Gateway;
  readonly journal: JournalThread;
  readonly link: MqttLink;
  readonly buses: ReadonlyMap<string, ModbusBus>;
  readonly member: EtcdGroupMember | null;
  /** The metrics and the board watch every event and view through it. */
  readonly outbox: PublishingOutbox;
}

/**
 * Made before it listens, as the gateway's first records and events may arrive while the port
 * is being bound: the board and the metrics take them from the moment they exist.
 */
export class HttpSide {
  readonly metrics: GatewayMetrics | null = null;
  readonly board: StatusBoard | null = null;
  private readonly statusRoutes: StatusRoutes | null = null;
  private server: Server | null = null;

  constructor(
    private readonly config: GatewayConfig,
    private readonly parts: HttpParts,
  ) {
    if (!config.metrics.enabled) return;
    const { health, gateway, journal, link, buses, member, outbox } = parts;
    const metrics = (this.metrics = new GatewayMetrics(health));
    outbox.watch({ event: (actuator, event) => metrics.onEvent(actuator, event) });
    if (!config.metrics.statusPage.enabled) return;
    const board = (this.board = new StatusBoard({
      gatewayId: config.gatewayId,
      version: packageVersion(),
      actuators: config.actuators.map(actuatorInfo),
      clock: realClock,
      facts: {
        brokerConnected: () => link.connected,
        buses: () => [...buses].map(([name, b]) => ({ name, up: b.isUp })),
        auditLag: () => journalLag(gateway),
        journalProblem: () => journal.problem(),
        healthProblem: () => health.problem(),
        ...(member ? { group: () => ({ phase: member.phase, etcdProblem: member.etcdProblem() }) } : {}),
      },
    }));
    outbox.watch({ event: (actuator, event) => board.event(actuator, event), view: (view) => board.state(view) });
    this.statusRoutes = new StatusRoutes({
      board,
      openAudit: () => AuditReader.open(config.journal.path),
      whenDurable: () => gateway.committer.whenDurable(),
      maxEventStreams: config.metrics.statusPage.maxEventStreams,
    });
  }

  /** Binds the port (when HTTP is on); on a failure the page's routes are closed again. */
  async listen(log: Logger): Promise<void> {
    const { config, metrics } = this;
    if (metrics === null) return;
    try {
      this.server = await serveHttp(config.metrics.host, config.metrics.port, metrics, this.parts.health, {
        status: this.statusRoutes,
        auth: httpAuth(config),
        maxConnections: config.metrics.statusPage.maxEventStreams + 64,
        hostNames: config.metrics.hostNames,
      });
    } catch (err) {
      this.closeRoutes();
      throw err;
    }
    sayWhoMayAsk(config, log);
  }

  /** The bound port, or null when HTTP is off. */
  get port(): number | null {
    const address = this.server?.address();
    return typeof address === "object" && address !== null ? address.port : null;
  }

  /** Closes the page's event streams and audit reader (they would hold the server and the journal's file open). */
  closeRoutes(): void {
    this.statusRoutes?.close();
  }

  close(): Promise<void> {
    return new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

function sayWhoMayAsk(config: GatewayConfig, log: Logger): void {
  if (isLoopbackHost(config.metrics.host)) return;
  const where = { host: config.metrics.host, port: config.metrics.port };
  if (config.metrics.auth !== undefined) {
    log.info(where, "metrics.host is not loopback: every request needs the credentials of metrics.auth (over plain HTTP)");
  } else {
    log.warn(
      where,
      "metrics.host is not loopback: /metrics and /healthz answer anyone who reaches this address, without authentication (metrics.allowNonLoopback)",
    );
  }
}

function actuatorInfo(a: GatewayConfig["actuators"][number]): ActuatorInfo {
  return {
    id: a.id,
    bus: a.bus,
    unit: a.unit,
    profile: a.profile,
    expiry: a.expiry.policy,
    points: Object.entries(a.points).map(([name, p]) => ({ name, unit: p.unit ?? "", writable: p.writable })),
  };
}

function httpAuth(config: GatewayConfig): HttpAuth | null {
  const auth = config.metrics.auth;
  if (auth === undefined) return null;
  if (auth.token !== undefined) return { token: auth.token };
  return { username: auth.username ?? "", password: auth.password ?? "" };
}

function packageVersion(): string {
  try {
    const { version } = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { version?: unknown };
    return typeof version === "string" ? version : "unknown";
  } catch {
    return "unknown";
  }
}
