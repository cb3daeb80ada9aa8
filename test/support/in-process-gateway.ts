/**
 * The shell's Gateway in the test's own process, over plain (unfenced) valves, started and
 * with every link up: what the shell tests and the journal's strace child drive. The daemon's
 * clock, scheduler and random bytes unless a test brings its own; a failed commit throws.
 */
import pino from "pino";
import type { ActuatorConfig } from "../../src/core/types.ts";
import { platformRandom, realClock, realScheduler } from "../../src/adapters/platform.ts";
import { Gateway, type ActuatorBinding, type GatewayDeps } from "../../src/shell/gateway.ts";
import type { DevicePort } from "../../src/shell/ports.ts";

type Limits = ActuatorConfig["limits"];

export interface InProcessGatewayOptions extends Partial<Omit<GatewayDeps, "actuators" | "journal" | "outbox">> {
  readonly journal: GatewayDeps["journal"];
  readonly outbox: GatewayDeps["outbox"];
  /** The snapshots the journal loaded (`journal.load()`). */
  readonly snapshots: ConstructorParameters<typeof Gateway>[1];
  /** One plain valve (a `position` point 0..100, held at expiry) per entry. */
  readonly devices: ReadonlyMap<string, DevicePort>;
  readonly limits?: Partial<Limits>;
  readonly pollIntervalMs?: number;
  readonly defaultDeadlineMs?: number;
}

const LIMITS: Limits = { minTtlMs: 100, maxTtlMs: 60_000, queueLimit: 4, recentLimit: 8, safeRetryMinMs: 100, safeRetryMaxMs: 1_000 };

function plainValve(
  id: string,
  device: DevicePort,
  options: Pick<InProcessGatewayOptions, "limits" | "pollIntervalMs" | "defaultDeadlineMs">,
): ActuatorBinding {
  return {
    id,
    config: {
      points: { position: { writable: true, min: 0, max: 100 } },
      expiryPolicy: { kind: "hold" },
      limits: { ...LIMITS, ...options.limits },
    },
    device,
    fenced: false,
    pollIntervalMs: options.pollIntervalMs ?? 3_600_000,
    defaultDeadlineMs: options.defaultDeadlineMs ?? 5_000,
  };
}

export function startInProcessGateway(options: InProcessGatewayOptions): Gateway {
  const { snapshots, devices, limits, pollIntervalMs, defaultDeadlineMs, ...deps } = options;
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
      actuators: [...devices].map(([id, device]) => plainValve(id, device, { limits, pollIntervalMs, defaultDeadlineMs })),
    },
    snapshots,
  );
  gateway.start();
  for (const id of devices.keys()) gateway.linkChanged(id, true); // what the bus reports once the unit answers
  return gateway;
}
