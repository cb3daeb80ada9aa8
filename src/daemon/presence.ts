/**
 * The start-up probe: before any device is touched, and again before the client id is taken,
 * is a gateway with this id, or one serving one of these actuators, already on the broker?
 * (docs/deploy.md: one gatewayId per gateway on a broker.)
 */
import type { Logger } from "pino";
import {
  ActuatorConflictError,
  DuplicateGatewayError,
  actuatorConflictOf,
  actuatorsServedByOthers,
  duplicateOf,
  identityOf,
  probeGateways,
  type ProbeResult,
} from "../adapters/mqtt/presence.ts";
import type { GatewayConfig } from "../config/schema.ts";

/** How long the start waits for the broker to ask about a gateway with the same id before it touches devices. */
const PROBE_AT_START_MS = 3000;

export class StartupProbe {
  readonly identity: ReturnType<typeof identityOf>;

  constructor(private readonly config: GatewayConfig) {
    this.identity = identityOf(config.gatewayId, config.journal.path, {
      actuators: config.actuators.map((a) => a.id),
      group: config.group?.name,
    });
  }

  /** The first look, bounded: an unreachable broker is asked again later ({@link untilReachable}). */
  first(): Promise<ProbeResult> {
    return probeGateways(this.config.mqtt, { connectTimeoutMs: PROBE_AT_START_MS });
  }

  /** Why this gateway must not serve beside what the probe found, or undefined. */
  refusal(probe: ProbeResult): DuplicateGatewayError | ActuatorConflictError | undefined {
    const { config, identity } = this;
    const duplicate = duplicateOf(probe, identity);
    if (duplicate !== undefined) return new DuplicateGatewayError(config.gatewayId, duplicate, config.mqtt.url);
    const conflict = actuatorConflictOf(probe, identity);
    return conflict === undefined ? undefined : new ActuatorConflictError(identity, conflict.other, conflict.actuators, config.mqtt.url);
  }

  servedByOthers(probe: ProbeResult): string[] {
    return actuatorsServedByOthers(probe, this.identity);
  }

  /** Whether another gateway with this id is connected now (asked when the broker takes the client id over). */
  async otherWithSameId(): Promise<ReturnType<typeof duplicateOf>> {
    return duplicateOf(await probeGateways(this.config.mqtt), this.identity);
  }

  /**
   * Asks again, with the link's backoff, while the broker was unreachable, so that the client
   * id is taken only by a gateway known to be alone; resolves with the probe that answered, or
   * null once `stopping()` says so.
   */
  async untilReachable(probe: ProbeResult, stopping: () => boolean, log: Logger): Promise<ProbeResult | null> {
    const { reconnect, url } = this.config.mqtt;
    for (let waitMs = reconnect.minMs; probe.kind === "unreachable" && !stopping(); waitMs = Math.min(2 * waitMs, reconnect.maxMs)) {
      // The same line as the link's own connection errors (a refused password reads the same).
      log.warn({ err: probe.reason, broker: url, retryInMs: waitMs }, "MQTT error");
      await new Promise((resolve) => setTimeout(resolve, waitMs));
      probe = await probeGateways(this.config.mqtt);
    }
    return stopping() ? null : probe;
  }
}
