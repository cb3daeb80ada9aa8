/**
 * The composition root: wires the real adapters (SQLite journal, Modbus buses, MQTT,
 * HTTP) to the shell and the core. Nothing here decides anything.
 */
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import { join } from "node:path";
import { pino, type Logger } from "pino";
import { EtcdGroupMember } from "./adapters/etcd/member.ts";
import { etcdClientFor, publishedConfig } from "./config/etcd.ts";
import { GatewayMetrics, serveHttp, type HealthSource } from "./adapters/http/metrics.ts";
import type { HttpAuth } from "./adapters/http/auth.ts";
import { StatusBoard, type ActuatorInfo } from "./adapters/http/status-board.ts";
import { StatusRoutes } from "./adapters/http/status-routes.ts";
import { AuditReader } from "./adapters/journal/audit.ts";
import { JournalThread, stallReportMs } from "./adapters/journal/worker-client.ts";
import { ModbusBus, OFFLINE_AFTER_FAILURES } from "./adapters/modbus/bus.ts";
import { busLink } from "./config/modbus-link.ts";
import { ModbusDevice } from "./adapters/modbus/device.ts";
import { LEASE_REQUEST_ROOM_PER_ACTUATOR, MAX_PENDING_READS_PER_ACTUATOR, MqttLink } from "./adapters/mqtt/link.ts";
import {
  ActuatorConflictError,
  DuplicateGatewayError,
  actuatorConflictOf,
  actuatorsServedByOthers,
  displacedSentence,
  duplicateOf,
  identityOf,
  probeGateways,
  type ProbeResult,
} from "./adapters/mqtt/presence.ts";
import { actuatorCoreConfig } from "./config/core.ts";
import { isLoopbackHost, quietAfterTimeoutMs, type GatewayConfig } from "./config/schema.ts";
import { leadershipConfig } from "./core/leadership.ts";
import { Gateway, type ActuatorBinding } from "./shell/gateway.ts";
import type { JournalEntry, Outbox } from "./shell/ports.ts";
import { platformRandom, realClock, realScheduler } from "./adapters/platform.ts";
import { MAX_UNSERVED_ACTUATORS, UnservedActuators } from "./shell/unserved.ts";
import { PACKAGE_ROOT } from "./package-root.ts";
import { EXIT } from "./exit-codes.ts";

/** How long the start waits for the broker to ask about a gateway with the same id before it touches devices. */
const PROBE_AT_START_MS = 3000;

/** Events kept for the first MQTT connection (a start with the broker down keeps the first ones). */
const EVENTS_BEFORE_CONNECT_LIMIT = 1024;

export interface Daemon {
  readonly gateway: Gateway;
  readonly journal: JournalThread;
  readonly link: MqttLink;
  readonly httpPort: number | null;
  /** Drains, flushes and disconnects; resolves when everything is closed. */
  stop(): Promise<void>;
  /** Resolves with an exit code when the daemon must stop by itself (a journal failure). */
  readonly fatal: Promise<number>;
  /** Why the daemon is not healthy (stopping, journal failed or not answering), or null: gates the systemd watchdog. */
  healthProblem(): string | null;
  /** The gateway group membership, when configured. */
  readonly group: EtcdGroupMember | null;
}

export async function startDaemon(config: GatewayConfig, log: Logger = pino({ level: config.logging.level })): Promise<Daemon> {
  // The journal's directory is never made here: one that is gone is an unmounted disk, and
  // a missing journal starts fresh only when the configuration says so (docs/deploy.md §7).
  // Its exclusive lock is held from here to close; the journal runs in a writer thread of its
  // own, so that no disk access of it blocks the event loop (worker-client.ts).
  const journal = new JournalThread({
    path: config.journal.path,
    recentLimit: config.commands.recentLimit,
    syncStallMs: config.journal.commitStallMs,
    createIfMissing: config.journal.createIfMissing,
    stallReportMs: stallReportMs(config.journal.commitStallMs),
    log: log.child({ component: "journal" }),
  });
  let snapshots: ReturnType<JournalThread["load"]>;
  try {
    snapshots = journal.load(); // throws JournalError: the caller reports it and exits
  } catch (error) {
    journal.close();
    throw error;
  }
  if (journal.fresh) {
    log.info({ journal: config.journal.path }, "new journal created: tokens start above the fences the fenced devices report");
  }
  try {
    keepGroupMembership(journal, config);
  } catch (error) {
    journal.close();
    throw error;
  }
  for (const [actuator, s] of snapshots) {
    log.info({ actuator, highestGranted: s.highestGranted, fence: s.fence }, "journal loaded");
  }

  // Before any device is touched: is a gateway with this id, or one serving one of these
  // actuators, already on the broker?
  const identity = identityOf(config.gatewayId, config.journal.path, {
    actuators: config.actuators.map((a) => a.id),
    group: config.group?.name,
  });
  const refusal = (probe: ProbeResult): DuplicateGatewayError | ActuatorConflictError | undefined => {
    const duplicate = duplicateOf(probe, identity);
    if (duplicate !== undefined) return new DuplicateGatewayError(config.gatewayId, duplicate, config.mqtt.url);
    const conflict = actuatorConflictOf(probe, identity);
    return conflict === undefined ? undefined : new ActuatorConflictError(identity, conflict.other, conflict.actuators, config.mqtt.url);
  };
  const firstProbe = await probeGateways(config.mqtt, { connectTimeoutMs: PROBE_AT_START_MS });
  const refused = refusal(firstProbe);
  if (refused !== undefined) {
    journal.close();
    throw refused;
  }
  const unserved = new UnservedActuators(
    config.gatewayId,
    new Set(config.actuators.map((a) => a.id)),
    realClock,
    snapshots,
    config.group?.name,
  );
  unserved.servedByOthers(actuatorsServedByOthers(firstProbe, identity));

  // Gateway group: the member is made below, once the gateway exists; the buses ask it before every frame.
  let member: EtcdGroupMember | null = null;
  const permit = config.group === undefined ? {} : { permit: () => member?.mayDriveDevices() ?? false };
  const buses = new Map<string, ModbusBus>();
  for (const [name, bus] of Object.entries(config.buses)) {
    buses.set(
      name,
      new ModbusBus(
        {
          name,
          link: busLink(bus),
          timeoutMs: bus.timeoutMs,
          reopenMinMs: bus.reconnect.minMs,
          reopenMaxMs: bus.reconnect.maxMs,
          quietAfterTimeoutMs: quietAfterTimeoutMs(bus.timeoutMs),
          offlineAfterFailures: OFFLINE_AFTER_FAILURES,
          queueLimitPerUnit: config.commands.queueLimit * 4,
          ...permit,
        },
        log.child({ bus: name }),
      ),
    );
  }

  const bindings: ActuatorBinding[] = config.actuators.map((a) => {
    const bus = buses.get(a.bus)!;
    bus.addUnit(a.unit);
    return {
      id: a.id,
      config: actuatorCoreConfig(config, a.id),
      device: new ModbusDevice({ bus, unit: a.unit, profile: a.profile, points: a.points, writeFunction: a.writeFunction }),
      fenced: a.profile === "fenced",
      pollIntervalMs: a.pollIntervalMs,
      defaultDeadlineMs: config.commands.defaultDeadlineMs,
      authenticated: a.authenticatedCommands,
    };
  });

  let resolveFatal: (code: number) => void = () => {};
  const fatal = new Promise<number>((resolve) => (resolveFatal = resolve));
  const stopForDuplicate = (sentence: string) => {
    log.fatal({ gatewayId: config.gatewayId, broker: config.mqtt.url }, sentence);
    resolveFatal(EXIT.CONFIG);
  };
  const link = new MqttLink({
    mqtt: config.mqtt,
    gatewayId: config.gatewayId,
    identity,
    otherWithSameId: async () => duplicateOf(await probeGateways(config.mqtt), identity),
    onDisplaced: (by) => stopForDuplicate(displacedSentence(config.gatewayId, config.mqtt.clientId, by)),
    limits: {
      maxPayloadBytes: config.mqtt.maxPayloadBytes,
      minTtlMs: config.leases.minTtlMs,
      maxTtlMs: config.leases.maxTtlMs,
      maxDeadlineMs: config.commands.maxDeadlineMs,
      defaultDeadlineMs: config.commands.defaultDeadlineMs,
    },
    log,
    maxPendingReadsPerActuator: MAX_PENDING_READS_PER_ACTUATOR,
    maxPendingRequestsPerActuator: config.commands.queueLimit + 1 + LEASE_REQUEST_ROOM_PER_ACTUATOR,
    ...(config.group === undefined ? {} : { role: "standby" as const }),
    budgets: config.mqtt.requestBudget,
    unservedStates: () => unserved.views(),
    onRefused: (actuator, holder, code) => {
      metrics?.onRefusedAtDoor(code);
      gateway.refusals.note(actuator, holder, code);
    },
  });

  let metrics: GatewayMetrics | null = null;
  // Events of the start (leases ended by the restart, the safe writes it owes) happen before
  // the broker is connected: they wait for the first connection, up to a bound.
  let beforeConnect: [string, Parameters<Outbox["event"]>[1]][] | null = [];
  // Set once the gateway exists (the board reads the committer's backlog); fed from here on.
  let board: StatusBoard | null = null;
  // In a group only the active gateway publishes states and events: a standby's (or a
  // deposed gateway's) view must not overwrite the active one's retained state.
  const outbox: Outbox = {
    reply: (ref, reply) => link.reply(ref, reply),
    event: (actuator, event) => {
      metrics?.onEvent(actuator, event);
      board?.event(actuator, event);
      if (!gateway.serving) return;
      if (beforeConnect === null) link.event(actuator, event);
      else if (beforeConnect.length < EVENTS_BEFORE_CONNECT_LIMIT) beforeConnect.push([actuator, event]);
    },
    state: (view) => {
      if (gateway.serving) link.state(view);
    },
    observe: (view) => board?.state(view),
  };
  const onDurable = (entries: readonly JournalEntry[]) => {
    try {
      board?.durable(entries);
    } catch (err) {
      log.error({ err }, "the status page could not take a journal record; decisions go on");
    }
  };

  let journalFailed = false;
  let stopping = false;
  const gateway = new Gateway(
    {
      gatewayId: config.gatewayId,
      journal,
      gatherMaxMs: config.journal.gatherMaxMs,
      audit: {
        lagMs: config.journal.auditLagMs,
        lagRecords: config.journal.auditLagRecords,
        queueLimit: config.journal.auditQueueLimit,
        stallMs: config.journal.commitStallMs,
      },
      clock: realClock,
      scheduler: realScheduler,
      random: platformRandom,
      outbox,
      log,
      actuators: bindings,
      onDurable,
      onFatal: () => {
        journalFailed = true;
        resolveFatal(EXIT.JOURNAL);
      },
      ...(config.group === undefined
        ? {}
        : {
            group: {
              commitGrant: (a, t) => member!.commitGrant(a, t),
              readToken: (a) => member!.readToken(a),
              mayDriveDevices: () => member!.mayDriveDevices(),
              stale: (why) => member!.stale(why),
            },
          }),
    },
    snapshots,
  );
  if (config.group !== undefined) member = groupMember(config, gateway, buses, link, unserved, log);

  /** Why the daemon is not healthy (stopping, journal failed or not answering), or null: gates the systemd watchdog. */
  const daemonProblem = (): string | null => {
    if (stopping) return "the gateway is shutting down";
    if (journalFailed) return "the journal failed";
    const problem = journal.problem();
    return problem === null ? null : `the journal cannot commit: ${problem}`;
  };
  /** Records handed to the journal and not yet durable (mostly the audit trail), the oldest's age, and the commits made. */
  const journalLag = () => {
    const { records, oldestAtMs } = gateway.committer.backlog();
    return { records, oldestMs: oldestAtMs === null ? 0 : realClock.monotonicMs() - oldestAtMs, commits: gateway.committer.commits };
  };
  const health: HealthSource = {
    // /healthz: the daemon's own problems, and no bus open at all (it cannot reach a single
    // device). One bus or device down is in the details, not a 503: the rest still serve.
    // Not the watchdog's rule: an unplugged adapter must not get the daemon restarted.
    // A group's standby opens no bus, by design.
    // A group member that has not reached etcd for longer than a TTL cannot tell whether
    // anything serves; one whose actuators differ from another member's will not take over.
    // A saturated audit queue is a 503 (commands are refused), not the watchdog's: a slow
    // disk must not get the daemon restarted.
    problem: () =>
      daemonProblem() ??
      member?.etcdProblem() ??
      member?.configProblem() ??
      gateway.committer.saturation() ??
      (gateway.serving && buses.size > 0 && [...buses.values()].every((b) => !b.isUp)
        ? `no bus is open (${[...buses.keys()].join(", ")}): no device can be reached`
        : null),
    details: () => ({
      ...(member ? { group: member.phase } : {}),
      mqtt: link.connected,
      buses: Object.fromEntries([...buses].map(([name, b]) => [name, b.isUp])),
      actuators: Object.fromEntries(gateway.actuatorIds().map((id) => [id, gateway.view(id)?.online ?? false])),
    }),
    queueDepths: () => gateway.actuatorIds().map((id) => [id, gateway.state(id)?.queue.length ?? 0] as [string, number]),
    linkStates: () => gateway.actuatorIds().map((id) => [id, gateway.state(id)?.online ?? false] as [string, boolean]),
    pointFaults: () => gateway.actuatorIds().map((id) => [id, Object.keys(gateway.view(id)?.pointFaults ?? {}).length] as [string, number]),
    journalLag,
  };

  let server: Server | null = null;
  let statusRoutes: StatusRoutes | null = null;
  if (config.metrics.enabled) {
    metrics = new GatewayMetrics(health);
    if (config.metrics.statusPage.enabled) {
      board = new StatusBoard({
        gatewayId: config.gatewayId,
        version: packageVersion(),
        actuators: config.actuators.map(actuatorInfo),
        clock: realClock,
        facts: {
          brokerConnected: () => link.connected,
          buses: () => [...buses].map(([name, b]) => ({ name, up: b.isUp })),
          auditLag: journalLag,
          journalProblem: () => journal.problem(),
          healthProblem: () => health.problem(),
          ...(member ? { group: () => ({ phase: member!.phase, etcdProblem: member!.etcdProblem() }) } : {}),
        },
      });
      statusRoutes = new StatusRoutes({
        board,
        openAudit: () => AuditReader.open(config.journal.path),
        whenDurable: () => gateway.committer.whenDurable(),
        maxEventStreams: config.metrics.statusPage.maxEventStreams,
      });
    }
    try {
      server = await serveHttp(config.metrics.host, config.metrics.port, metrics, health, {
        status: statusRoutes,
        auth: httpAuth(config),
        maxConnections: config.metrics.statusPage.maxEventStreams + 64,
        hostNames: config.metrics.hostNames,
      });
    } catch (err) {
      statusRoutes?.close();
      gateway.stop();
      journal.close();
      throw err;
    }
    if (!isLoopbackHost(config.metrics.host)) {
      if (config.metrics.auth !== undefined) {
        log.info(
          { host: config.metrics.host, port: config.metrics.port },
          "metrics.host is not loopback: every request needs the credentials of metrics.auth (over plain HTTP)",
        );
      } else {
        log.warn(
          { host: config.metrics.host, port: config.metrics.port },
          "metrics.host is not loopback: /metrics and /healthz answer anyone who reaches this address, without authentication (metrics.allowNonLoopback)",
        );
      }
    }
  }

  const unitsOf = new Map(config.actuators.map((a) => [`${a.bus}\u0000${a.unit}`, a.id]));
  for (const [name, bus] of buses) {
    const m = metrics;
    if (m) {
      bus.on("transaction", (_unit, seconds, result) => m.onTransaction(name, seconds, result));
      bus.on("link", (up) => m.onBus(name, up));
    }
    const b = board;
    if (b) {
      bus.on("transaction", (unit, seconds, result) => {
        const actuator = unitsOf.get(`${name}\u0000${unit}`);
        if (actuator !== undefined) b.answer(actuator, result === "ok" || result === "exception", seconds);
      });
    }
    bus.on("link", (up) => {
      // The first scheduled poll ran before the bus had opened: without this, a unit would
      // stay offline, and a fenced one without leases, for a whole poll interval.
      if (up) for (const a of config.actuators) if (a.bus === name) gateway.pollNow(a.id);
    });
    bus.on("unit", (unit, online, reason) => {
      for (const a of config.actuators) if (a.bus === name && a.unit === unit) gateway.linkChanged(a.id, online, reason);
    });
    // A group's standby opens no port: on a shared RS-485 line only one master may drive it.
    if (member === null) bus.start();
  }
  if (member === null) gateway.start();
  void (async () => {
    // Not reachable before the devices were: ask again before taking the client id.
    let probe = firstProbe;
    for (
      let waitMs = config.mqtt.reconnect.minMs;
      probe.kind === "unreachable" && !stopping;
      waitMs = Math.min(2 * waitMs, config.mqtt.reconnect.maxMs)
    ) {
      // The same line as the link's own connection errors (a refused password reads the same).
      log.warn({ err: probe.reason, broker: config.mqtt.url, retryInMs: waitMs }, "MQTT error");
      await new Promise((resolve) => setTimeout(resolve, waitMs));
      probe = await probeGateways(config.mqtt);
    }
    const refusedLate = refusal(probe);
    if (refusedLate !== undefined) return stopForDuplicate(refusedLate.message);
    if (stopping) return;
    // A group member campaigns only once it is known to be the only one with its id.
    member?.start();
    await link.start(gateway);
    const held = beforeConnect ?? [];
    beforeConnect = null;
    for (const [actuator, event] of held) link.event(actuator, event);
  })();
  log.info(
    {
      gatewayId: config.gatewayId,
      actuators: gateway.actuatorIds(),
      journal: config.journal.path,
      ...(config.group ? { group: config.group.name } : {}),
    },
    "fencegate daemon started",
  );

  const address = server?.address();
  return {
    gateway,
    journal,
    link,
    httpPort: typeof address === "object" && address !== null ? address.port : null,
    fatal,
    healthProblem: daemonProblem,
    group: member,
    async stop() {
      if (stopping) return;
      stopping = true;
      if (journalFailed) {
        // Nothing can be decided or recorded any more: stop as a crash would (the journal's
        // restart reads what is durable), without draining or closing the journal, whose
        // close syncs the disk again and would hang on a stalled one.
        log.warn("the journal failed: stopping at once, as a crash would, without draining; commands in progress are not on record");
      } else {
        log.info("draining: no new requests; finishing the commands in progress");
        const drained = await gateway.drain(config.shutdown.drainTimeoutMs);
        if (!drained)
          log.warn(
            { drainTimeoutMs: config.shutdown.drainTimeoutMs },
            "drain timed out; unfinished commands will read as OUTCOME_UNKNOWN after restart",
          );
      }
      // Stepping down gives the leader key up at once: a standby takes over without waiting for the TTL.
      await member?.stop();
      gateway.stop();
      await link.stop();
      await Promise.all([...buses.values()].map((b) => b.close()));
      await gateway.committer.idle(); // the commits in flight finish before the journal closes
      statusRoutes?.close(); // its event streams would hold the server open, its reader the journal's file
      if (!journalFailed) journal.close();
      member?.close();
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
      log.info("fencegate daemon stopped");
    },
  };
}

/**
 * A journal that served in a gateway group and is started without `group:` (taken out of
 * the group, or the section lost in an edit) would serve beside the group's active gateway:
 * two grants of one token. Refused until `fencegate journal leave-group` says it is meant.
 */
export class LeftGroupError extends Error {
  override readonly name = "LeftGroupError";
  constructor(
    readonly journalPath: string,
    readonly group: string,
  ) {
    super(
      `The journal ${journalPath} served in gateway group "${group}", and this configuration has no group section: alone, this gateway would serve its actuators beside the group's active gateway, and both would grant the same tokens. Put the group section back; or, if this gateway leaves the group for good and no other member serves these actuators any more, run fencegate journal leave-group once.`,
    );
  }
}

function keepGroupMembership(journal: JournalThread, config: GatewayConfig): void {
  const was = journal.group();
  if (config.group !== undefined) {
    if (was !== config.group.name) journal.setGroup(config.group.name);
  } else if (was !== null) {
    throw new LeftGroupError(config.journal.path, was);
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

/**
 * The gateway group membership (config.group): stands by until this gateway holds the
 * leader key; then opens the buses, takes every actuator over (device fences first) and
 * only then takes requests. On stepping down, device I/O has already stopped (the buses
 * ask the member before every frame); leases end, the buses close, requests stop.
 */
function groupMember(
  config: GatewayConfig,
  gateway: Gateway,
  buses: ReadonlyMap<string, ModbusBus>,
  link: MqttLink,
  unserved: UnservedActuators,
  log: Logger,
): EtcdGroupMember {
  const group = config.group!;
  let activation = 0;
  /** Once active: the actuators the group has granted on that this gateway does not serve are said to be unserved. */
  const publishGroupUnserved = async (activated: number) => {
    try {
      unserved.groupTokens(await member.groupTokens(MAX_UNSERVED_ACTUATORS + config.actuators.length));
    } catch (err) {
      log.warn({ err }, "could not read the group's tokens from etcd; actuators only the group knows are not said to be unserved");
    }
    if (activated !== activation || member.phase !== "active") return;
    for (const view of unserved.views()) link.state(view);
  };
  const member: EtcdGroupMember = new EtcdGroupMember({
    client: etcdClientFor(group),
    group: group.name,
    gatewayId: config.gatewayId,
    config: leadershipConfig(group.leaseTtlMs, group.selfFenceMarginMs),
    clock: realClock,
    scheduler: realScheduler,
    log: log.child({ component: "group" }),
    published: publishedConfig(config),
    onActivate: (term) => {
      const mine = ++activation;
      const startedMs = performance.now();
      for (const bus of buses.values()) bus.start();
      void Promise.all([...buses.values()].map((bus) => whenUp(bus, Math.max(...Object.values(config.buses).map((b) => b.timeoutMs)) * 2)))
        .then(() => gateway.takeOver())
        .then(() => {
          if (mine !== activation || member.phase !== "active") return;
          link.setRole("active");
          for (const id of gateway.actuatorIds()) {
            const view = gateway.view(id);
            if (view) link.state(view);
          }
          void publishGroupUnserved(mine);
          log.info(
            { term: term.revision, takeoverMs: Math.round(performance.now() - startedMs), secured: gateway.allSecured() },
            "serving as the group's active gateway",
          );
        });
    },
    onDeactivate: (reason, detail) => {
      activation++;
      link.setRole("standby");
      gateway.standDown();
      for (const bus of buses.values()) void bus.close();
      log.warn({ reason, detail }, "standing by: leases ended, buses closed, no requests taken");
    },
  });
  log.info(
    { group: group.name, endpoints: group.endpoints, leaseTtlMs: group.leaseTtlMs },
    "group member started; standing by until this gateway holds the group's leader key",
  );
  return member;
}

/** Resolves when the bus is open, or after `timeoutMs` (a device that is not there yet is retried by the gateway). */
function whenUp(bus: ModbusBus, timeoutMs: number): Promise<void> {
  if (bus.isUp) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, timeoutMs);
    function done(): void {
      clearTimeout(timer);
      bus.off("link", onLink);
      resolve();
    }
    function onLink(up: boolean): void {
      if (up) done();
    }
    bus.on("link", onLink);
  });
}
