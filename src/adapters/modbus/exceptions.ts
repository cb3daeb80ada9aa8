/**
 * What a Modbus exception answer to a write says about its effect, from the Modbus
 * application protocol's exception table (V1.1b3, section 7). The one place that decides
 * between "not done" (DEVICE_ERROR) and "may have acted" (OUTCOME_UNKNOWN); docs/mqtt-api.md
 * ("What fencegate adds") states the same table for controller authors.
 */
import { FENCE_REFUSED_EXCEPTION } from "../../../packages/protocol/src/modbus-profile.ts";
import type { ErrorCode } from "../../../packages/protocol/src/index.ts";

export interface ExceptionMeaning {
  readonly name: string;
  /** none: the request was not carried out; uncertain: it may have been, in part or in full. */
  readonly effect: "none" | "uncertain";
}

const MODBUS_EXCEPTIONS: Readonly<Record<number, ExceptionMeaning>> = {
  0x01: { name: "illegal function", effect: "none" },
  0x02: { name: "illegal data address", effect: "none" },
  0x03: { name: "illegal data value", effect: "none" },
  // "An unrecoverable error occurred while the server was attempting to perform the requested action."
  0x04: { name: "server device failure", effect: "uncertain" },
  // Accepted and still being processed: the effect comes later, or not at all.
  0x05: { name: "acknowledge", effect: "uncertain" },
  0x06: { name: "server device busy", effect: "none" },
  // Defined only for programming (FC13/14) and file-record (FC20/21) functions: a device
  // that answers them to a register write is outside the specification; nothing is assumed.
  0x07: { name: "negative acknowledge", effect: "uncertain" },
  0x08: { name: "memory parity error", effect: "uncertain" },
  // A gateway in the path could not route the request: it never reached the device.
  0x0a: { name: "gateway path unavailable", effect: "none" },
  // A gateway in the path sent the request on and heard nothing back: the device may have acted.
  0x0b: { name: "gateway target device failed to respond", effect: "uncertain" },
};

/** 0x0B, 0x4647: how Modbus codes and registers are written in the profile and the logs. */
export function hex(n: number, digits = 2): string {
  return `0x${n.toString(16).toUpperCase().padStart(digits, "0")}`;
}

/** "exception 0x0B (gateway target device failed to respond)", for messages and logs. */
export function describeException(code: number, fencedProfile = false): string {
  const name =
    fencedProfile && code === FENCE_REFUSED_EXCEPTION
      ? "fence refused"
      : (MODBUS_EXCEPTIONS[code]?.name ?? "not in the Modbus exception table");
  return `exception ${hex(code)} (${name})`;
}

/**
 * The outcome of a write the device answered with exception `code`: DEVICE_REJECTED for
 * the fenced profile's 0x46, DEVICE_ERROR when the table says the write was not done,
 * OUTCOME_UNKNOWN for the rest, including every code outside the table.
 */
export function exceptionOutcome(
  code: number,
  fencedProfile: boolean,
): { code: Extract<ErrorCode, "DEVICE_REJECTED" | "DEVICE_ERROR" | "OUTCOME_UNKNOWN">; message: string } {
  const what = describeException(code, fencedProfile);
  if (fencedProfile && code === FENCE_REFUSED_EXCEPTION) {
    return { code: "DEVICE_REJECTED", message: `The device's own fence refused the write (${what}); nothing was changed.` };
  }
  if (MODBUS_EXCEPTIONS[code]?.effect === "none") {
    return { code: "DEVICE_ERROR", message: `The device answered Modbus ${what}: the write was not carried out.` };
  }
  return {
    code: "OUTCOME_UNKNOWN",
    message: `The device answered Modbus ${what}, which does not say whether the write took effect; the fence stays raised, re-read state.`,
  };
}
