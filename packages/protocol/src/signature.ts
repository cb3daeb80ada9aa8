/**
 * Authenticated commands (an extension of the contract): on an actuator configured with
 * `authenticatedCommands: true`, each grant carries a fresh per-lease secret, and every
 * command, renew and release under that lease carries `mac`, the HMAC-SHA256 (lowercase
 * hex) of the request's canonical form keyed with the secret. A fencing token is not a
 * password: anyone who can publish can copy it from the retained state, but not the secret.
 *
 * Canonical form: the JSON text (as ECMAScript's JSON.stringify writes it, no spaces) of
 *   ["fencegate-mac-v1", verb, actuator, holder, token, seq, set, deadlineMs]
 * where verb is "command", "lease/renew" or "lease/release"; for renew and release the seq
 * slot carries the request's `counter`, and set and deadlineMs are null; set is an array of
 * [point, value] pairs sorted by point name; deadlineMs is the deadline the gateway applies
 * (send it explicitly when signing).
 *
 * Replays: a command's (token, seq) already makes a replayed command a DUPLICATE or
 * STALE_SEQ with no effect. Renew and release carry `counter`, which must rise from one
 * signed renew or release of the lease to the next (the gateway keeps the highest per lease).
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import type { PointValues } from "./values.ts";

export interface SignedFields {
  readonly verb: "command" | "lease/renew" | "lease/release";
  readonly actuator: string;
  readonly holder: string;
  readonly token: number;
  readonly seq?: number | undefined;
  readonly set?: PointValues | undefined;
  readonly deadlineMs?: number | undefined;
  /** Renew and release: the request's place in the lease's sequence of them. */
  readonly counter?: number | undefined;
}

export function canonicalForm(f: SignedFields): string {
  const set = f.set === undefined ? null : Object.entries(f.set).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const seq = f.verb === "command" ? f.seq : f.counter;
  return JSON.stringify(["fencegate-mac-v1", f.verb, f.actuator, f.holder, f.token, seq ?? null, set, f.deadlineMs ?? null]);
}

export function sign(secret: string, fields: SignedFields): string {
  return createHmac("sha256", secret).update(canonicalForm(fields)).digest("hex");
}

/** Constant-time comparison of `mac` with the expected one; false for a missing mac. */
export function verify(secret: string, fields: SignedFields, mac: string | null | undefined): boolean {
  if (typeof mac !== "string" || !/^[0-9a-f]{64}$/.test(mac)) return false;
  return timingSafeEqual(Buffer.from(sign(secret, fields), "hex"), Buffer.from(mac, "hex"));
}
