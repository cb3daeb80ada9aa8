/** A bus's configuration as the Modbus adapter's link options: adapters take options, never the schema. */
import type { BusLink } from "../adapters/modbus/bus.ts";
import type { BusConfig } from "./schema.ts";

export function busLink(bus: BusConfig): BusLink {
  if (bus.type === "tcp") return { kind: "tcp", host: bus.host, port: bus.port };
  return { kind: "rtu", line: { path: bus.path, baudRate: bus.baudRate, parity: bus.parity, stopBits: bus.stopBits, dataBits: 8 } };
}
