/**
 * The gateway group's role for this daemon (docs/gateway-group.md): the etcd member, and
 * what activation and stepping down do to the buses, the gateway and the link.
 */
import type { Logger } from "pino";
import { EtcdGroupMember, type GroupMemberOptions } from "../adapters/etcd/member.ts";
import type { ModbusBus } from "../adapters/modbus/bus.ts";
import type { MqttLink } from "../adapters/mqtt/link.ts";
import { realClock, realScheduler } from "../adapters/platform.ts";
import { etcdClientFor, publishedConfig } from "../config/etcd.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { leadershipConfig } from "../core/leadership.ts";
import type { Gateway } from "../shell/gateway.ts";
import type { Clock, GroupPort } from "../shell/ports.ts";
import { MAX_UNSERVED_ACTUATORS, type UnservedActuators } from "../shell/unserved.ts";
import { whenUp } from "./buses.ts";

/**
 * The gateway group membership (config.group): stands by until this gateway holds the
 * leader key; then opens the buses, takes every actuator over (device fences first) and
 * only then takes requests. On stepping down, device I/O has already stopped (the buses
 * ask the member before every frame); leases end, the buses close, requests stop.
 */
export function groupMember(
  config: GatewayConfig,
  gateway: Gateway,
  buses: ReadonlyMap<string, ModbusBus>,
  link: MqttLink,
  unserved: UnservedActuators,
  log: Logger,
): EtcdGroupMember {
  const group = config.group!;
  const upWithinMs = Math.max(...Object.values(config.buses).map((b) => b.timeoutMs)) * 2;
  /** Once active: the actuators the group has granted on that this gateway does not serve are said to be unserved. */
  const publishGroupUnserved = async (stillServing: () => boolean) => {
    try {
      unserved.groupTokens(await member.groupTokens(MAX_UNSERVED_ACTUATORS + config.actuators.length));
    } catch (err) {
      log.warn({ err }, "could not read the group's tokens from etcd; actuators only the group knows are not said to be unserved");
    }
    if (!stillServing()) return;
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
    ...groupRole({
      gateway,
      openBuses: async () => {
        for (const bus of buses.values()) bus.start();
        await Promise.all([...buses.values()].map((bus) => whenUp(bus, upWithinMs)));
      },
      closeBuses: () => {
        for (const bus of buses.values()) void bus.close();
      },
      link,
      active: () => member.phase === "active",
      serving: (stillServing) => void publishGroupUnserved(stillServing),
      clock: realClock,
      log,
    }),
  });
  log.info(
    { group: group.name, endpoints: group.endpoints, leaseTtlMs: group.leaseTtlMs },
    "group member started; standing by until this gateway holds the group's leader key",
  );
  return member;
}

/** The shell's view of the group member, made before the member (which needs the gateway). */
export function groupPort(member: () => EtcdGroupMember): GroupPort {
  return {
    commitGrant: (a, t) => member().commitGrant(a, t),
    readToken: (a) => member().readToken(a),
    mayDriveDevices: () => member().mayDriveDevices(),
    stale: (why) => member().stale(why),
  };
}

/** What becoming active and stepping down act on: the daemon's buses and MQTT link, or the simulator's. */
export interface GroupRoleParts {
  readonly gateway: Gateway;
  /** Opens every bus; resolves once they are up, or the wait for them is over. */
  openBuses(): Promise<void>;
  closeBuses(): void;
  readonly link: Pick<MqttLink, "setRole" | "state">;
  /** Whether the member is (still) the active one. */
  active(): boolean;
  /** Serving now: anything more to announce, while `stillServing()`. */
  serving?(stillServing: () => boolean): void;
  readonly clock: Clock;
  readonly log: Logger;
}

/** Activation and stepping down, for the member to call (the simulator runs the same). */
export function groupRole(parts: GroupRoleParts): Pick<GroupMemberOptions, "onActivate" | "onDeactivate"> {
  const { gateway, link, clock, log } = parts;
  let activation = 0;
  return {
    onActivate: (term) => {
      const mine = ++activation;
      const stillServing = () => mine === activation && parts.active();
      const startedMs = clock.monotonicMs();
      void parts
        .openBuses()
        .then(() => gateway.takeOver())
        .then(() => {
          if (!stillServing()) return;
          link.setRole("active");
          for (const id of gateway.actuatorIds()) {
            const view = gateway.view(id);
            if (view) link.state(view);
          }
          parts.serving?.(stillServing);
          log.info(
            { term: term.revision, takeoverMs: Math.round(clock.monotonicMs() - startedMs), secured: gateway.allSecured() },
            "serving as the group's active gateway",
          );
        });
    },
    onDeactivate: (reason, detail) => {
      activation++;
      link.setRole("standby");
      gateway.standDown();
      parts.closeBuses();
      log.warn({ reason, detail }, "standing by: leases ended, buses closed, no requests taken");
    },
  };
}
