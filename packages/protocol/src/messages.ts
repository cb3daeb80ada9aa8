/**
 * The messages of the MQTT API (docs/mqtt-api.md) as they are on the wire: replies, the
 * retained state, events and the gateway's status and identity. The gateway builds them
 * (src/adapters/mqtt/payloads.ts), the client reads them; neither keeps its own copy.
 */
import type { ErrorCode } from "./codes.ts";
import type { PointValues } from "./values.ts";

/**
 * The fence of an actuator: the highest `(token, seq)` ever accepted, or, right after a
 * grant, the new token with `seq: null` (the new lease has not commanded yet). A token of
 * 0 means nothing was ever granted.
 */
export interface Fence {
  readonly token: number;
  readonly seq: number | null;
}

/** A lease as others see it: who holds it and for how much longer. */
export interface LeaseView {
  readonly holder: string;
  readonly token: number;
  readonly expiresInMs: number;
}

/** A refusal: the `error` object of a reply. */
export interface ErrorBody {
  readonly code: ErrorCode;
  readonly message: string;
  readonly fence?: Fence;
  readonly lease?: LeaseView;
  /** DUPLICATE: the reply the first delivery of this `(token, seq)` got. */
  readonly original?: Reply;
  readonly modbusCode?: number;
}

/**
 * A request by verb, as the gateway takes it once its payload passed every check (the `id` and
 * the reply route travel beside it). `mac` and `counter`: authenticated actuators' extension.
 */
export type GatewayRequest =
  | { readonly verb: "lease/acquire"; readonly holder: string; readonly ttlMs: number }
  | {
      readonly verb: "lease/renew";
      readonly holder: string;
      readonly token: number;
      readonly mac?: string | null;
      readonly counter?: number | null;
    }
  | {
      readonly verb: "lease/release";
      readonly holder: string;
      readonly token: number;
      readonly mac?: string | null;
      readonly counter?: number | null;
    }
  | {
      readonly verb: "command";
      readonly holder: string;
      readonly token: number;
      readonly seq: number;
      readonly set: PointValues;
      readonly deadlineMs?: number | undefined;
      readonly mac?: string | null;
    }
  | { readonly verb: "read"; readonly holder?: string | null | undefined };

/** A reply without the request id (the gateway puts `id` first). */
export type Reply =
  | {
      readonly ok: true;
      readonly lease: { holder: string; token: number; ttlMs: number; secret?: string } | null;
      /** On an acquire that returns the holder's live lease: the seqs of its token already used. */
      readonly fence?: Fence;
    }
  | {
      readonly ok: true;
      readonly outcome: "applied";
      readonly token: number;
      readonly seq: number;
      readonly applied: PointValues;
    }
  | { readonly ok: false; readonly error: ErrorBody };

export type EventType = "granted" | "renewed" | "released" | "expired" | "accepted" | "rejected" | "applied" | "outcome-unknown";

/** One decision, as `B/A/events` carries it without its time. */
export interface EventBody {
  readonly type: EventType;
  readonly holder?: string;
  readonly token?: number;
  readonly seq?: number;
  readonly code?: ErrorCode;
  /** On `expired`: the lease ended because the gateway restarted or stopped, not by its TTL. */
  readonly reason?: "restart" | "shutdown";
  /** `applied` events: the values the device confirmed. */
  readonly applied?: PointValues;
}

/** One `B/A/events` payload. */
export type EventMessage = EventBody & { readonly at: string };

/** The retained `B/A/state`'s keys the contract names, in its order. */
export interface ContractState {
  readonly actuator: string;
  readonly online: boolean;
  readonly lease: LeaseView | null;
  readonly fence: Fence;
  readonly points: PointValues;
  readonly at: string;
}

/** fencegate's extensions to the state, after the contract's keys. */
export interface StateExtensions {
  /** How long before `at` the device last answered a read; null: not since the gateway started. */
  readonly pointsAgeMs: number | null;
  /** The gateway serving the actuator: its `B/gateway/<id>/status` says whether this state is current. */
  readonly gateway: string;
  /** The gateway's own safe-value write while it is owed, else null. */
  readonly safeWrite: { readonly token: number; readonly attempts: number; readonly set: PointValues } | null;
  /** Points whose reading is not a finite number, with what it was; present only when there are some. */
  readonly pointFaults?: Readonly<Record<string, string>>;
  /** Why the actuator is offline or cannot be leased; present only when the gateway knows. */
  readonly problem?: string;
}

/** The retained `B/A/state` as fencegate publishes it. */
export type StateMessage = ContractState & StateExtensions;

/** A gateway group member's role; a gateway on its own has none. */
export type GatewayRole = "active" | "standby";

/** The retained `B/gateway/<id>/status`: `online` from a gateway on its own, a member's role, or `offline` (also the last will). */
export type GatewayStatus = "online" | "offline" | GatewayRole;
export const GATEWAY_STATUSES: ReadonlySet<string> = new Set<GatewayStatus>(["online", "offline", "active", "standby"]);

/**
 * A retained state as it stands, given its gateway's status: a gateway that is `offline`
 * (stopped, or its last will after a crash), or a group member that stands by now, serves no
 * lease and reaches no device, whatever its last retained state said.
 */
export function withGatewayStatus<S extends ContractState>(state: S, status: GatewayStatus | undefined): S {
  return status === "offline" || status === "standby" ? { ...state, online: false, lease: null } : state;
}

/** Who a gateway is, in its answer to `B/gateway/read`. */
export interface GatewayIdentity {
  /** The gatewayId. */
  readonly id: string;
  /** The same for every start of one installation: this host and this journal (a hash: no paths on the broker). */
  readonly instance: string;
  readonly host: string;
  readonly pid: number;
  /** The actuator ids it serves; absent in answers of gateways before they said so. */
  readonly actuators?: readonly string[];
  /** Its gateway group's name, if a member. */
  readonly group?: string;
}
