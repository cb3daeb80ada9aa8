/**
 * The contract's error codes (docs/mqtt-api.md), in the order the contract
 * resolves them when several apply. The order is part of the contract: refusals must be
 * deterministic so a controller can act on the code alone.
 */
export const ERROR_CODES = [
  "INVALID_REQUEST",
  "RETAINED_REQUEST",
  "UNKNOWN_ACTUATOR",
  // Extension (authenticated actuators): the request's MAC is missing or wrong.
  "BAD_SIGNATURE",
  // Extension (authenticated actuators): a signed renew or release whose counter is not
  // above the last one the lease accepted: a replay.
  "REPLAYED_REQUEST",
  "UNKNOWN_POINT",
  "READ_ONLY_POINT",
  "OUT_OF_RANGE",
  "LEASE_HELD",
  "UNKNOWN_TOKEN",
  "DUPLICATE",
  "STALE_TOKEN",
  "LEASE_EXPIRED",
  "NOT_HOLDER",
  "STALE_SEQ",
  "DEADLINE_EXCEEDED",
  "OVERLOADED",
  // Extension (gateway groups): the group's etcd could not confirm a grant; nothing was granted.
  "GROUP_UNAVAILABLE",
  "DEVICE_UNAVAILABLE",
  "DEVICE_REJECTED",
  "DEVICE_ERROR",
  "OUTCOME_UNKNOWN",
  // Every token up to 2^53-1 was granted (a recovery floor set too high): no lease can be granted.
  "TOKENS_EXHAUSTED",
  "INTERNAL",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];
