/**
 * The Modbus buses and the actuators on them: made from the configuration, bound to the
 * gateway, and their events fanned out to the gateway, the metrics and the status page.
 */
import type { Logger } from "pino";
import type { GatewayMetrics } from "../adapters/http/metrics.ts";
import type { StatusBoard } from "../adapters/http/status-board.ts";
import { ModbusBus, OFFLINE_AFTER_FAILURES } from "../adapters/modbus/bus.ts";
import { ModbusDevice } from "../adapters/modbus/device.ts";
import { actuatorCoreConfig } from "../config/core.ts";
import { busLink } from "../config/modbus-link.ts";
import { quietAfterTimeoutMs, type GatewayConfig } from "../config/schema.ts";
import type { ActuatorBinding } from "../shell/actuator-runtime.ts";
import type { Gateway } from "../shell/gateway.ts";

/** `permit`, in a gateway group: asked before every frame, so that only the active member drives a device. */
export function openBuses(config: GatewayConfig, log: Logger, permit?: () => boolean): Map<string, ModbusBus> {
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
          ...(permit ? { permit } : {}),
        },
        log.child({ bus: name }),
      ),
    );
  }
  return buses;
}

export function actuatorBindings(config: GatewayConfig, buses: ReadonlyMap<string, ModbusBus>): ActuatorBinding[] {
  return config.actuators.map((a) => {
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
}

export function wireBuses(
  config: GatewayConfig,
  buses: ReadonlyMap<string, ModbusBus>,
  gateway: Gateway,
  watchers: { readonly metrics: GatewayMetrics | null; readonly board: StatusBoard | null },
): void {
  const { metrics, board } = watchers;
  const unitsOf = new Map(config.actuators.map((a) => [`${a.bus}\u0000${a.unit}`, a.id]));
  for (const [name, bus] of buses) {
    if (metrics) {
      bus.on("transaction", (_unit, seconds, result) => metrics.onTransaction(name, seconds, result));
      bus.on("link", (up) => metrics.onBus(name, up));
    }
    if (board) {
      bus.on("transaction", (unit, seconds, result) => {
        const actuator = unitsOf.get(`${name}\u0000${unit}`);
        if (actuator !== undefined) board.answer(actuator, result === "ok" || result === "exception", seconds);
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
  }
}

/** Resolves when the bus is open, or after `timeoutMs` (a device that is not there yet is retried by the gateway). */
export function whenUp(bus: ModbusBus, timeoutMs: number): Promise<void> {
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
