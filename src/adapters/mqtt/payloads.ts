/**
 * Payloads the gateway publishes (docs/mqtt-api.md): replies, retained state,
 * events and the gateway status. Pure: data in, JSON text out, keys in the contract's order.
 */
import type { EventMessage, GatewayIdentity, GatewayRole, GatewayStatus, StateMessage } from "../../../packages/protocol/src/index.ts";
import type { CoreEvent, Reply } from "../../core/types.ts";
import type { StateView } from "../../shell/ports.ts";
import type { ParseResult } from "./requests.ts";

/** Points in name order, so equal states publish byte-identical retained payloads. */
function sortedPoints<T>(points: Readonly<Record<string, T>>): Record<string, T> {
  const out: Record<string, T> = {};
  for (const k of Object.keys(points).sort()) out[k] = points[k] as T;
  return out;
}

export function stateJson(s: StateView): StateMessage {
  return {
    actuator: s.actuator,
    online: s.online,
    lease: s.lease === null ? null : { holder: s.lease.holder, token: s.lease.token, expiresInMs: s.lease.expiresInMs },
    fence: { token: s.fence.token, seq: s.fence.seq },
    points: sortedPoints(s.points),
    at: s.at.toISOString(),
    pointsAgeMs: s.pointsAgeMs,
    gateway: s.gateway,
    safeWrite:
      s.safeWrite === null ? null : { token: s.safeWrite.token, attempts: s.safeWrite.attempts, set: sortedPoints(s.safeWrite.set) },
    // The extensions appear only when they have something to say.
    ...(Object.keys(s.pointFaults).length > 0 ? { pointFaults: sortedPoints(s.pointFaults) } : {}),
    ...(s.problem !== null ? { problem: s.problem } : {}),
  };
}

/** The retained `B/A/state` payload. */
export function statePayload(s: StateView): string {
  return JSON.stringify(stateJson(s));
}

/** A reply to a lease or command request: `{"id", ...reply}` with `id` first. */
export function replyPayload(id: string, reply: Reply): string {
  return JSON.stringify({ id, ...reply });
}

/** The success reply to a `read`: `{"id", "ok": true, "state": {...}}`. */
export function readReplyPayload(id: string, state: StateView): string {
  return JSON.stringify({ id, ok: true, state: stateJson(state) });
}

/** The reply to a request `parseRequest` refused. */
export function refusalPayload(refused: Extract<ParseResult, { kind: "refused" }>): string {
  return replyPayload(refused.id, { ok: false, error: { code: refused.code, message: refused.message } });
}

/** One `B/A/events` payload: `{"type", "at", "holder"?, "token"?, "seq"?, "code"?, "reason"?}`. */
export function eventPayload(event: CoreEvent, at: Date): string {
  const out: { -readonly [K in keyof EventMessage]: EventMessage[K] } = { type: event.type, at: at.toISOString() };
  if (event.holder !== undefined) out.holder = event.holder;
  if (event.token !== undefined) out.token = event.token;
  if (event.seq !== undefined) out.seq = event.seq;
  if (event.code !== undefined) out.code = event.code;
  if (event.reason !== undefined) out.reason = event.reason;
  if (event.applied !== undefined) out.applied = event.applied;
  return JSON.stringify(out);
}

/** The reply to `B/gateway/read`: `{"id", "ok": true, "gateway": {"id", "instance", "host", "pid"}}`. */
export function identityReplyPayload(id: string, identity: GatewayIdentity): string {
  return JSON.stringify({ id, ok: true, gateway: identity });
}

/**
 * The retained `B/gateway/<gatewayId>/actuators` payload: `{"gateway", "actuators": [ids]}`,
 * and `"group"` for a gateway group's member (its members list the same actuators).
 */
export function directoryPayload(gatewayId: string, actuators: readonly string[], group?: string): string {
  return JSON.stringify({ gateway: gatewayId, actuators, ...(group === undefined ? {} : { group }) });
}

/**
 * The retained `B/gateway/<gatewayId>/status` payload (also the last will: `offline`). A
 * gateway on its own says `online`; a member of a gateway group says its role instead.
 */
export function gatewayStatusPayload(online: boolean, role?: GatewayRole): GatewayStatus {
  return online ? (role ?? "online") : "offline";
}
