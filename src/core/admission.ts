/**
 * The door (docs/architecture.md, "Why a request was refused"): the one step every front end
 * hands a parsed request through, purely. It orders the refusals made before the actuator's
 * core decides: the actuator not served here, the gateway shutting down, and for an acquire
 * the device's fence not yet known (or, in a gateway group, the actuator not yet taken over).
 * What passes becomes the core's input; the lease, token, signature and journal-backlog rules
 * follow there (actuator.ts, signed.ts), in that order.
 *
 * Before it, each front end refuses what only it can see, cheaply, ahead of any work: a
 * payload that does not validate, a requester over its rate budget, an actuator with the most
 * requests of its kind in progress (src/adapters/mqtt).
 */
import type { ErrorBody, GatewayRequest } from "../../packages/protocol/src/index.ts";
import type { Input, ReplyRef } from "./types.ts";

/** What the door knows of one actuator when a request arrives: handed in as a snapshot. */
export interface Door {
  /** The gateway is still taking requests (not draining for a stop, nor stopped by a failed commit). */
  readonly accepting: boolean;
  /** In a gateway group: whether this gateway has taken the actuator over in its term. */
  readonly takenOver: boolean | null;
  /** A fenced device's own fence has been read (always true for a device without one). */
  readonly fenceKnown: boolean;
  /** Why the actuator is offline or cannot be leased, or null. */
  readonly problem: string | null;
  /** The deadline a command without one gets. */
  readonly defaultDeadlineMs: number;
  /** Set when the journal is too far behind to take a command's records: why. */
  readonly journalBehind: string | undefined;
  /** Authenticated actuators: a fresh random secret, kept by the core if the acquire is granted. */
  readonly secret: string | undefined;
}

export type Admission =
  | { readonly kind: "refused"; readonly error: ErrorBody }
  /** A read is answered from a fresh poll of the device, not by the core. */
  | { readonly kind: "read" }
  | { readonly kind: "decide"; readonly input: Input };

/** Decides at the door on `request` for `actuator`; `door` is undefined for an actuator not served here. */
export function admit(actuator: string, ref: ReplyRef, request: GatewayRequest, door: Door | undefined, nowMs: number): Admission {
  if (door === undefined) return refused("UNKNOWN_ACTUATOR", `No actuator "${actuator}" on this gateway.`);
  if (!door.accepting) return refused("DEVICE_UNAVAILABLE", "The gateway is shutting down; retry against it once it is back.");
  switch (request.verb) {
    case "read":
      return { kind: "read" };
    case "lease/acquire": {
      const unavailable = noGrantYet(door);
      if (unavailable !== null) return refused("DEVICE_UNAVAILABLE", unavailable);
      const { holder, ttlMs } = request;
      return { kind: "decide", input: { type: "acquire", nowMs, ref, holder, ttlMs, secret: door.secret } };
    }
    case "lease/renew":
    case "lease/release": {
      const { holder, token } = request;
      const signature = { actuator, mac: request.mac ?? null, counter: request.counter ?? null };
      const type = request.verb === "lease/renew" ? "renew" : "release";
      return { kind: "decide", input: { type, nowMs, ref, holder, token, signature } };
    }
    case "command": {
      const { holder, token, seq, set } = request;
      const deadlineMs = request.deadlineMs ?? door.defaultDeadlineMs;
      const signature = { actuator, mac: request.mac ?? null };
      return {
        kind: "decide",
        input: { type: "command", nowMs, ref, holder, token, seq, set, deadlineMs, signature, journalBehind: door.journalBehind },
      };
    }
  }
}

function refused(code: ErrorBody["code"], message: string): Admission {
  return { kind: "refused", error: { code, message } };
}

/**
 * Why no lease can be granted yet, or null: a group member that has not taken the actuator over
 * (raised the device's fence to a token of the group), or a fenced device whose fence is unread.
 * Until then a grant could be at or below a token the device already holds.
 */
function noGrantYet(door: Door): string | null {
  const { problem } = door;
  const because = problem === null ? "." : `: ${problem}${problem.endsWith(".") ? "" : "."}`;
  if (door.takenOver === false)
    return `This gateway has not yet taken the actuator over (the device's fence raised to a token of the group); no lease is granted until it has${because}`;
  if (door.fenceKnown) return null;
  return problem === null
    ? "The device's own fence has not been read yet; no lease is granted until it has."
    : `The device's own fence cannot be read, so no lease is granted${because}`;
}
