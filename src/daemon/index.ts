/**
 * The composition root: wires the real adapters (SQLite journal, Modbus buses, MQTT, HTTP,
 * etcd) to the shell and the core. Nothing here decides anything; each piece it wires is in a
 * file of this folder (docs/architecture.md).
 */
import { pino, type Logger } from "pino";
import type { EtcdGroupMember } from "../adapters/etcd/member.ts";
import type { JournalThread } from "../adapters/journal/worker-client.ts";
import type { ModbusBus } from "../adapters/modbus/bus.ts";
import { LEASE_REQUEST_ROOM_PER_ACTUATOR, MAX_PENDING_READS_PER_ACTUATOR, MqttLink, type MqttLinkOptions } from "../adapters/mqtt/link.ts";
import { displacedSentence, type ProbeResult } from "../adapters/mqtt/presence.ts";
import { platformRandom, realClock, realScheduler } from "../adapters/platform.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { Gateway, type GatewayDeps } from "../shell/gateway.ts";
import { PublishingOutbox } from "../shell/outbox.ts";
import { UnservedActuators } from "../shell/unserved.ts";
import { actuatorBindings, openBuses, wireBuses } from "./buses.ts";
import { groupMember, groupPort } from "./group.ts";
import { healthSource, Lifecycle } from "./health.ts";
import { HttpSide } from "./http.ts";
import { openJournal } from "./journal.ts";
import { StartupProbe } from "./presence.ts";

export { LeftGroupError } from "./journal.ts";

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
  const { journal, snapshots } = openJournal(config, log);
  const probe = new StartupProbe(config);
  const firstProbe = await probe.first();
  const refused = probe.refusal(firstProbe);
  if (refused !== undefined) {
    journal.close();
    throw refused;
  }
  const actuatorIds = new Set(config.actuators.map((a) => a.id));
  const unserved = new UnservedActuators(config.gatewayId, actuatorIds, realClock, snapshots, config.group?.name);
  unserved.servedByOthers(probe.servedByOthers(firstProbe));

  // Gateway group: the member is made once the gateway exists; the buses ask it before every frame.
  let member: EtcdGroupMember | null = null;
  const buses = openBuses(config, log, config.group === undefined ? undefined : () => member?.mayDriveDevices() ?? false);
  const lifecycle = new Lifecycle(journal);
  const stopForDuplicate = (sentence: string) => {
    log.fatal({ gatewayId: config.gatewayId, broker: config.mqtt.url }, sentence);
    lifecycle.refuseToServe();
  };
  let http: HttpSide | null = null;
  const link = mqttLink(config, probe, unserved, log, {
    onDisplaced: (by) => stopForDuplicate(displacedSentence(config.gatewayId, config.mqtt.clientId, by)),
    onRefused: (actuator, holder, code) => {
      http?.metrics?.onRefusedAtDoor(code);
      gateway.refusals.note(actuator, holder, code);
    },
  });
  const outbox = new PublishingOutbox(link, (): boolean => gateway.serving);
  const gateway: Gateway = new Gateway(
    gatewayDeps(config, journal, outbox, log, {
      actuators: actuatorBindings(config, buses),
      onDurable: (entries) => {
        try {
          http?.board?.durable(entries);
        } catch (err) {
          log.error({ err }, "the status page could not take a journal record; decisions go on");
        }
      },
      onFatal: () => lifecycle.failJournal(),
      ...(config.group === undefined ? {} : { group: groupPort(() => member!) }),
    }),
    snapshots,
  );
  if (config.group !== undefined) member = groupMember(config, gateway, buses, link, unserved, log);
  const health = healthSource({ lifecycle, gateway, link, buses, member });
  http = new HttpSide(config, { health, gateway, journal, link, buses, member, outbox });
  try {
    await http.listen(log);
  } catch (err) {
    gateway.stop();
    journal.close();
    throw err;
  }
  wireBuses(config, buses, gateway, http);
  // A group's standby opens no port: on a shared RS-485 line only one master may drive it.
  if (member === null) {
    for (const bus of buses.values()) bus.start();
    gateway.start();
  }
  void connectWhenAlone({ probe, firstProbe, lifecycle, log, stopForDuplicate }, { gateway, link, outbox, member });
  const group = config.group ? { group: config.group.name } : {};
  log.info(
    { gatewayId: config.gatewayId, actuators: gateway.actuatorIds(), journal: config.journal.path, ...group },
    "fencegate daemon started",
  );
  const parts = { config, log, lifecycle, gateway, journal, link, buses, member, http };
  return {
    gateway,
    journal,
    link,
    httpPort: http.port,
    fatal: lifecycle.fatal,
    healthProblem: () => lifecycle.problem(),
    group: member,
    stop: () => stopDaemon(parts),
  };
}

/**
 * Takes the client id and the requests once this gateway is known to be alone on the broker:
 * not reachable before the devices were, the broker is asked again first.
 */
async function connectWhenAlone(
  start: {
    probe: StartupProbe;
    firstProbe: ProbeResult;
    lifecycle: Lifecycle;
    log: Logger;
    stopForDuplicate: (sentence: string) => void;
  },
  parts: { gateway: Gateway; link: MqttLink; outbox: PublishingOutbox; member: EtcdGroupMember | null },
): Promise<void> {
  const probed = await start.probe.untilReachable(start.firstProbe, () => start.lifecycle.stopping, start.log);
  if (probed === null) return;
  const refused = start.probe.refusal(probed);
  if (refused !== undefined) return start.stopForDuplicate(refused.message);
  parts.member?.start(); // a group member campaigns only once it is known to be the only one with its id
  await parts.link.start(parts.gateway);
  parts.outbox.connected();
}

function mqttLink(
  config: GatewayConfig,
  probe: StartupProbe,
  unserved: UnservedActuators,
  log: Logger,
  on: Pick<MqttLinkOptions, "onDisplaced" | "onRefused">,
): MqttLink {
  return new MqttLink({
    mqtt: config.mqtt,
    gatewayId: config.gatewayId,
    identity: probe.identity,
    otherWithSameId: () => probe.otherWithSameId(),
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
    ...on,
  });
}

function gatewayDeps(
  config: GatewayConfig,
  journal: JournalThread,
  outbox: PublishingOutbox,
  log: Logger,
  rest: Pick<GatewayDeps, "actuators" | "onDurable" | "onFatal" | "group">,
): GatewayDeps {
  return {
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
    ...rest,
  };
}

interface Running {
  readonly config: GatewayConfig;
  readonly log: Logger;
  readonly lifecycle: Lifecycle;
  readonly gateway: Gateway;
  readonly journal: JournalThread;
  readonly link: MqttLink;
  readonly buses: ReadonlyMap<string, ModbusBus>;
  readonly member: EtcdGroupMember | null;
  readonly http: HttpSide;
}

async function stopDaemon({ config, log, lifecycle, gateway, journal, link, buses, member, http }: Running): Promise<void> {
  if (lifecycle.stopping) return;
  lifecycle.stopping = true;
  if (lifecycle.journalFailed) {
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
  http.closeRoutes(); // its event streams would hold the server open, its reader the journal's file
  if (!lifecycle.journalFailed) journal.close();
  member?.close();
  await http.close();
  log.info("fencegate daemon stopped");
}
