/**
 * A gateway group's configuration as the etcd adapters take it: the client for its endpoints,
 * and the settings a member publishes for the others to compare (docs/gateway-group.md).
 */
import { readFileSync } from "node:fs";
import { publishedSettings, type PublishedConfig } from "../adapters/etcd/actuator-digest.ts";
import { EtcdClient } from "../adapters/etcd/client.ts";
import { coreLimits } from "./core.ts";
import type { GatewayConfig, GroupConfig } from "./schema.ts";

/**
 * What this member publishes: per actuator its configuration entry without the bus (the
 * connection may differ between gateways: another serial port), and the gateway-wide lease
 * and command limits.
 */
export function publishedConfig(config: GatewayConfig): PublishedConfig {
  const actuators: Record<string, unknown> = {};
  for (const { bus: _bus, ...settings } of config.actuators) actuators[settings.id] = settings;
  return publishedSettings(config.gatewayId, { limits: coreLimits(config), actuators });
}

/** The etcd client a `group` configuration describes (TLS files already checked by the config loader). */
export function etcdClientFor(group: GroupConfig): EtcdClient {
  const tls = group.tls;
  return new EtcdClient({
    endpoints: group.endpoints,
    requestTimeoutMs: group.requestTimeoutMs,
    ...(tls
      ? {
          tls: {
            rejectUnauthorized: tls.rejectUnauthorized,
            ...(tls.caFile ? { ca: readFileSync(tls.caFile) } : {}),
            ...(tls.certFile ? { cert: readFileSync(tls.certFile) } : {}),
            ...(tls.keyFile ? { key: readFileSync(tls.keyFile) } : {}),
          },
        }
      : {}),
    ...(group.username !== undefined ? { username: group.username, password: group.password ?? "" } : {}),
  });
}
