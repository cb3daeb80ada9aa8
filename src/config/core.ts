/** From the gateway configuration to what the pure core needs for one actuator. */
import type { ActuatorConfig, CoreLimits, ExpiryPolicy, PointSpec } from "../core/types.ts";
import type { ActuatorEntry, GatewayConfig } from "./schema.ts";

/** The core's limits, the same for every actuator on this gateway. */
export function coreLimits(config: GatewayConfig): CoreLimits {
  return {
    minTtlMs: config.leases.minTtlMs,
    maxTtlMs: config.leases.maxTtlMs,
    queueLimit: config.commands.queueLimit,
    recentLimit: config.commands.recentLimit,
    safeRetryMinMs: config.commands.safeWriteRetry.minMs,
    safeRetryMaxMs: config.commands.safeWriteRetry.maxMs,
  };
}

/** The actuator's entry; throws on an id the configuration does not define (a caller's bug). */
function findActuator(config: GatewayConfig, actuatorId: string): ActuatorEntry {
  const entry = config.actuators.find((a) => a.id === actuatorId);
  if (entry === undefined) throw new RangeError(`No actuator "${actuatorId}" in the configuration.`);
  return entry;
}

export function actuatorCoreConfig(config: GatewayConfig, actuatorId: string): ActuatorConfig {
  const entry = findActuator(config, actuatorId);
  const points: Record<string, PointSpec> = {};
  for (const [name, p] of Object.entries(entry.points)) points[name] = { writable: p.writable, min: p.min, max: p.max };
  const expiryPolicy: ExpiryPolicy = entry.expiry.policy === "safe" ? { kind: "safe", set: { ...entry.expiry.set } } : { kind: "hold" };
  return { points, expiryPolicy, limits: coreLimits(config) };
}
