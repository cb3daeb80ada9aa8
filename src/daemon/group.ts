/**
 * The gateway group's role for this daemon (docs/gateway-group.md): the etcd member, and
 * what activation and stepping down do to the buses, the gateway and the link.
 */
import type { Logger } from "pino";
import { EtcdGroupMember } from "../adapters/etcd/member.ts";
import type { ModbusBus } from "../adapters/modbus/bus.ts";
import type { MqttLink } from "../adapters/mqtt/link.ts";
import { realClock, realScheduler } from "../adapters/platform.ts";
import { etcdClientFor, publishedConfig } from "../config/etcd.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { leadershipConfig } from "../core/leadership.ts";
import type { Gateway } from "../shell/gateway.ts";
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
