/**
 * Authenticated commands (an extension of the contract): on an actuator configured with
 * `authenticatedCommands: true`, each grant carries a fresh per-lease secret, and every
 * command, renew and release under that lease carries `mac`, the HMAC-SHA256 (lowercase
 * hex) of the request's canonical form keyed with the secret. A fencing token is not a
 * password: anyone who can publish can copy it from the retained state, but not the secret.
 *
 * Canonical form: the JSON text (as ECMAScript's JSON.stringify writes it, no spaces) of
 *   ["fencegate-mac-v1", verb, actuator, holder, token, seq, set, deadlineMs]
 * where verb is "command", "lease/renew" or "lease/release"; seq, set and deadlineMs are
 * null for renew and release; set is an array of [point, value] pairs sorted by point name;
 * deadlineMs is the deadline the gateway applies (send it explicitly when signing).
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import type { PointValues } from "./types.ts";

export interface SignedFields {
  readonly verb: "command" | "lease/renew" | "lease/release";
  readonly actuator: string;
  readonly holder: string;
  readonly token: number;
  readonly seq?: number | undefined;
  readonly set?: PointValues | undefined;
  readonly deadlineMs?: number | undefined;
}

export function canonicalForm(f: SignedFields): string {
  const set = f.set === undefined ? null : Object.entries(f.set).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify(["fencegate-mac-v1", f.verb, f.actuator, f.holder, f.token, f.seq ?? null, set, f.deadlineMs ?? null]);
}

export function sign(secret: string, fields: SignedFields): string {
  return createHmac("sha256", secret).update(canonicalForm(fields)).digest("hex");
}

/** Constant-time comparison of `mac` with the expected one; false for a missing mac. */
export function verify(secret: string, fields: SignedFields, mac: string | null | undefined): boolean {
  if (typeof mac !== "string" || !/^[0-9a-f]{64}$/.test(mac)) return false;
  return timingSafeEqual(Buffer.from(sign(secret, fields), "hex"), Buffer.from(mac, "hex"));
}
