/**
 * Payloads the gateway publishes (docs/mqtt-api.md): replies, retained state,
 * events and the gateway status. Pure: data in, JSON text out, keys in the contract's order.
 */
import type { CoreEvent, PointValues, Reply } from "../../core/types.ts";
import type { StateView } from "../../shell/ports.ts";
import type { ParseResult } from "./requests.ts";

export interface StateJson {
  readonly actuator: string;
  readonly online: boolean;
  readonly lease: { readonly holder: string; readonly token: number; readonly expiresInMs: number } | null;
  readonly fence: { readonly token: number; readonly seq: number | null };
  readonly points: PointValues;
  readonly at: string;
  /** An extension: how long before `at` the device last answered a read; null: not since the gateway started. */
  readonly pointsAgeMs: number | null;
}

/** Points in name order, so equal states publish byte-identical retained payloads. */
function sortedPoints(points: PointValues): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(points).sort()) out[k] = points[k] as number;
  return out;
}

export function stateJson(s: StateView): StateJson {
  return {
    actuator: s.actuator,
    online: s.online,
    lease: s.lease === null ? null : { holder: s.lease.holder, token: s.lease.token, expiresInMs: s.lease.expiresInMs },
    fence: { token: s.fence.token, seq: s.fence.seq },
    points: sortedPoints(s.points),
    at: s.at.toISOString(),
    pointsAgeMs: s.pointsAgeMs,
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

/** One `B/A/events` payload: `{"type", "at", "holder"?, "token"?, "seq"?, "code"?}`. */
export function eventPayload(event: CoreEvent, at: Date): string {
  const out: Record<string, unknown> = { type: event.type, at: at.toISOString() };
  if (event.holder !== undefined) out.holder = event.holder;
  if (event.token !== undefined) out.token = event.token;
  if (event.seq !== undefined) out.seq = event.seq;
  if (event.code !== undefined) out.code = event.code;
  return JSON.stringify(out);
}

/** The retained `B/gateway/<gatewayId>/status` payload (also the last will: `offline`). */
export function gatewayStatusPayload(online: boolean): "online" | "offline" {
  return online ? "online" : "offline";
}
