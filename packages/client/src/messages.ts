/** The gateway's messages as the client reads them: the retained state, the events, a gateway's status. */
import type { FenceView } from "./errors.ts";

export interface ActuatorState {
  readonly actuator: string;
  readonly online: boolean;
  readonly lease: { readonly holder: string; readonly token: number; readonly expiresInMs: number } | null;
  readonly fence: FenceView;
  readonly points: Readonly<Record<string, number>>;
  readonly at: string;
  /** The gateway serving the actuator: its `B/gateway/<id>/status` says whether this state is current. */
  readonly gateway?: string;
  /** How long before `at` the device last answered a read; null: not since the gateway started. */
  readonly pointsAgeMs?: number | null;
  /** The gateway's own safe-value write, while it is owed. */
  readonly safeWrite?: { readonly token: number; readonly attempts: number; readonly set: Readonly<Record<string, number>> } | null;
  /** Points whose reading is not a finite number, and what it was (fencegate extension). */
  readonly pointFaults?: Readonly<Record<string, string>>;
  /** Why the actuator is offline or cannot be leased (fencegate extension). */
  readonly problem?: string;
}

/** `online` from a gateway on its own; `active` / `standby` from a gateway group's members. */
export type GatewayStatus = "online" | "offline" | "active" | "standby";
export const GATEWAY_STATUSES: ReadonlySet<string> = new Set<GatewayStatus>(["online", "offline", "active", "standby"]);

/**
 * A retained state as it stands, given its gateway's status: a gateway that is `offline`
 * (stopped, or its last will after a crash), or a group member that stands by now, serves no
 * lease and reaches no device, whatever its last retained state said.
 */
export function withGatewayStatus(state: ActuatorState, status: GatewayStatus | undefined): ActuatorState {
  return status === "offline" || status === "standby" ? { ...state, online: false, lease: null } : state;
}

export interface ActuatorEvent {
  readonly type: string;
  readonly at: string;
  readonly holder?: string;
  readonly token?: number;
  readonly seq?: number;
  readonly code?: string;
  /** On `applied` events: the values the device confirmed. */
  readonly applied?: Readonly<Record<string, number>>;
}
