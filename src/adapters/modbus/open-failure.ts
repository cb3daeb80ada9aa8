/**
 * Why a bus could not be opened, as an operator reads it: the error without serialport's
 * doubled "Error: Error:" prefix, and what to check for the common causes.
 */
import type { BusLink } from "./bus.ts";

export function openFailure(err: unknown, bus: string, link: BusLink): { reason: string; hint: string } {
  const reason = (err instanceof Error ? err.message : String(err)).replace(/^(Error: )+/, "");
  const where = link.kind === "rtu" ? `buses.${bus}.path` : `buses.${bus}.host and .port`;
  const hint = /No such file|ENOENT/i.test(reason)
    ? `No such device: check ${where} (ls -l /dev/serial/by-id/) and that the adapter is plugged in.`
    : /Permission denied|EACCES/i.test(reason)
      ? "No permission: run the gateway as a member of the dialout group (the unit sets SupplementaryGroups=dialout)."
      : /lock|busy|Resource temporarily unavailable/i.test(reason)
        ? "Another process has the port open: find it with fuser, and stop it."
        : /Inappropriate ioctl/i.test(reason)
          ? `Not a serial port: check ${where}.`
          : /ECONNREFUSED/.test(reason)
            ? `Nothing accepts Modbus TCP there: check ${where} and that the device is on.`
            : `Check ${where}, then \`fencegate doctor\`. The gateway keeps retrying.`;
  return { reason, hint };
}
