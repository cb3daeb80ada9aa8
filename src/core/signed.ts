/**
 * Authenticated actuators (docs/mqtt-api.md, packages/protocol/src/signature.ts): under a live
 * lease that has a secret, a request for that lease's token must carry the MAC of its fields
 * keyed with the secret, and a signed renew or release a counter above the lease's last.
 * Requests for any other token pass untouched: their secret is gone, and the lease checks
 * refuse them as they would anyone's.
 */
import { verify } from "../../packages/protocol/src/index.ts";
import type { ErrorBody, Input, Lease } from "./types.ts";

type Signable = Extract<Input, { type: "renew" | "release" | "command" }>;

/** The refusal a signed request earns, or the lease to keep (its counter raised) when it passes. */
export function checkSignature(lease: Lease | null, input: Signable): { readonly error: ErrorBody } | { readonly lease: Lease | null } {
  if (lease?.secret === undefined || lease.token !== input.token || input.nowMs >= lease.expiresAtMs) return { lease };
  const actuator = input.signature?.actuator ?? "";
  const mac = input.signature?.mac ?? null;
  if (input.type === "command") {
    const { holder, token, seq, set, deadlineMs } = input;
    return verify(lease.secret, { verb: "command", actuator, holder, token, seq, set, deadlineMs }, mac) ? { lease } : badSignature(mac);
  }
  const verb = input.type === "renew" ? "lease/renew" : "lease/release";
  const counter = input.signature?.counter ?? null;
  if (counter === null)
    return refusal(
      "BAD_SIGNATURE",
      `A signed ${verb} must carry counter, above the counter of the lease's previous signed renew or release; nothing was changed.`,
    );
  if (!verify(lease.secret, { verb, actuator, holder: input.holder, token: input.token, counter }, mac)) return badSignature(mac);
  const last = lease.counter ?? 0;
  if (counter <= last)
    return refusal(
      "REPLAYED_REQUEST",
      `This ${verb} carries counter ${counter}, not above ${last}, the lease's last: a replayed request changes nothing. Sign each renew and release with a higher counter.`,
    );
  return { lease: { ...lease, counter } };
}

function refusal(code: "BAD_SIGNATURE" | "REPLAYED_REQUEST", message: string): { readonly error: ErrorBody } {
  return { error: { code, message } };
}

function badSignature(mac: string | null): { readonly error: ErrorBody } {
  return refusal(
    "BAD_SIGNATURE",
    mac
      ? "The mac does not match this request under the lease's secret; nothing was changed."
      : "This actuator takes only requests signed with the lease's secret (mac); nothing was changed.",
  );
}
