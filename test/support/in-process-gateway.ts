/**
 * The shell's Gateway in the test's own process, over valves (plain and held at expiry unless
 * `valves` says otherwise), started and, unless `linksUp` is off, with every link up: what
 * the shell tests, the scenario harness and the journal's strace child drive. The daemon's
 * clock, scheduler and random bytes unless a test brings its own; a failed commit throws.
 */
import pino from "pino";
import type { ActuatorConfig, ExpiryPolicy } from "../../src/core/types.ts";
import { platformRandom, realClock, realScheduler } from "../../src/adapters/platform.ts";
import type { ActuatorBinding } from "../../src/shell/actuator-runtime.ts";
import { Gateway, type GatewayDeps } from "../../src/shell/gateway.ts";
import type { DevicePort } from "../../src/shell/ports.ts";

type Limits = ActuatorConfig["limits"];

/** How a valve differs from the plain one held at expiry. */
export interface ValveOptions {
  readonly fenced?: boolean;
  readonly expiryPolicy?: ExpiryPolicy;
}

export interface InProcessGatewayOptions extends Partial<Omit<GatewayDeps, "actuators" | "journal" | "outbox">> {
  readonly journal: GatewayDeps["journal"];
  readonly outbox: GatewayDeps["outbox"];
  /** The snapshots the journal loaded (`journal.load()`). */
  readonly snapshots: ConstructorParameters<typeof Gateway>[1];
  /** One valve (a `position` point 0..100) per entry. */
  readonly devices: ReadonlyMap<string, DevicePort>;
  /** Per actuator, what its valve does differently; the rest are plain and held at expiry. */
  readonly valves?: ReadonlyMap<string, ValveOptions>;
  /** Report every link up at once (default), as the bus does once a unit answers; off for ports that report it themselves. */
  readonly linksUp?: boolean;
  readonly limits?: Partial<Limits>;
  readonly pollIntervalMs?: number;
  readonly defaultDeadlineMs?: number;
}

const LIMITS: Limits = { minTtlMs: 100, maxTtlMs: 60_000, queueLimit: 4, recentLimit: 8, safeRetryMinMs: 100, safeRetryMaxMs: 1_000 };

function valve(
  id: string,
  device: DevicePort,
  options: Pick<InProcessGatewayOptions, "limits" | "pollIntervalMs" | "defaultDeadlineMs">,
  { fenced = false, expiryPolicy = { kind: "hold" } }: ValveOptions = {},
): ActuatorBinding {
  return {
    id,
    config: {
      points: { position: { writable: true, min: 0, max: 100 } },
      expiryPolicy,
      limits: { ...LIMITS, ...options.limits },
    },
    device,
    fenced,
    pollIntervalMs: options.pollIntervalMs ?? 3_600_000,
    defaultDeadlineMs: options.defaultDeadlineMs ?? 5_000,
  };
}

export function startInProcessGateway(options: InProcessGatewayOptions): Gateway {
  const { snapshots, devices, valves, linksUp = true, limits, pollIntervalMs, defaultDeadlineMs, ...deps } = options;
  const gateway = new Gateway(
    {
      gatewayId: "test",
      clock: realClock,
      scheduler: realScheduler,
      random: platformRandom,
      log: pino({ level: "silent" }),
      onFatal: (err) => {
        throw err;
      },
      ...deps,
      actuators: [...devices].map(([id, device]) => valve(id, device, { limits, pollIntervalMs, defaultDeadlineMs }, valves?.get(id))),
    },
    snapshots,
  );
  gateway.start();
  if (linksUp) for (const id of devices.keys()) gateway.linkChanged(id, true); // what the bus reports once the unit answers
  return gateway;
}
