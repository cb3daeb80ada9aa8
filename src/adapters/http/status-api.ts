/**
 * The status page's data as the gateway serves it: the body of /api/status, the events of
 * /api/events and the answers of /api/actuators/<id>/audit. The board (status-board.ts) and
 * the routes (status-routes.ts) are annotated with these types, so tsc proves they build
 * them; the page (status-page/status.js, checked by tsc through JSDoc) reads them from here.
 *
 * They stay beside the server rather than in packages/protocol: only this gateway's own page
 * reads them, and it ships with the gateway, so they are no contract between sides that are
 * released apart. What they share with the MQTT contract (fence, lease, event type, point
 * values) is the contract's own type.
 */
import type { EventType, Fence, LeaseView, PointValues } from "../../../packages/protocol/src/index.ts";
import type { AuditPage } from "../journal/audit.ts";

/** The counters above the cards: the whole gateway, the last minute where it says so. */
export interface Counters {
  readonly actuators: number;
  readonly online: number;
  readonly offline: number;
  readonly leases: number;
  readonly refusalsLastMinute: Readonly<Record<string, number>>;
  readonly outcomeUnknownLastMinute: number;
}

/** The gateway line and the counters: read when a page loads, and sent every couple of seconds. */
export interface GatewayLine {
  readonly id: string;
  readonly version: string;
  readonly uptimeMs: number;
  readonly broker: { readonly connected: boolean };
  /** Why /healthz answers 503, or null. */
  readonly health: { readonly problem: string | null };
  /** In a gateway group: the member's phase, and what every card says while it does not serve; null on its own. */
  readonly group: { readonly phase: string; readonly note: string | null } | null;
  readonly journal: {
    /** Since the journal last made records durable; null: not since start. */
    readonly lastCommitAgeMs: number | null;
    readonly auditLag: { readonly records: number; readonly oldestMs: number; readonly commits: number };
    readonly problem: string | null;
  };
  readonly buses: readonly { readonly name: string; readonly up: boolean }[];
  readonly counters: Counters;
  /** By actuator id; grows between full updates, so the page counts on from it by its own clock. */
  readonly lastAnswerAgeMs: Readonly<Record<string, number | null>>;
}

/** One actuator's card. Ages are in ms at the time the gateway built it; null: never since start. */
export interface ActuatorCard {
  readonly id: string;
  readonly bus: string;
  readonly unit: number;
  readonly profile: "fenced" | "plain";
  readonly expiry: "hold" | "safe";
  /** The gateway serving it, as in its retained state. */
  readonly gateway: string;
  readonly online: boolean;
  readonly problem: string | null;
  readonly lastAnswerAgeMs: number | null;
  readonly rttMs: number | null;
  readonly lease: LeaseView | null;
  readonly fence: Fence;
  readonly pointsAgeMs: number | null;
  /** In display order; `fault`: why the reading is not a number, or null. */
  readonly points: readonly {
    readonly name: string;
    readonly unit: string;
    readonly writable: boolean;
    readonly value: number | null;
    readonly fault: string | null;
  }[];
  /** `set`: null until the journal made the command's intent durable; `outcome`: null until it settled. */
  readonly lastAccepted: {
    readonly holder: string;
    readonly token: number;
    readonly seq: number;
    readonly set: PointValues | null;
    readonly outcome: string | null;
    readonly ageMs: number;
  } | null;
  readonly lastRefusal: {
    readonly holder: string | null;
    readonly token: number | null;
    readonly seq: number | null;
    readonly code: string;
    readonly ageMs: number;
  } | null;
  /** The gateway's own safe-value write while it is owed; `lastCode`: why the last attempt did not settle it. */
  readonly safeWrite: {
    readonly token: number;
    readonly attempts: number;
    readonly set: PointValues;
    readonly lastCode: string | null;
    readonly ageMs: number;
  } | null;
  readonly refusalsLastMinute: Readonly<Record<string, number>>;
  readonly outcomeUnknownLastMinute: number;
  readonly outcomeUnknownTotal: number;
}

/** One line of the live feed. */
export interface Decision {
  /** Rises by one per decision: a page that reconnects knows what it has seen. */
  readonly n: number;
  /** The gateway's wall clock (ISO-8601), as on B/A/events. */
  readonly at: string;
  readonly actuator: string;
  readonly type: EventType;
  readonly holder?: string;
  readonly token?: number;
  readonly seq?: number;
  readonly code?: string;
  /** The gateway's own safe-value write (holder @gateway). */
  readonly safeWrite: boolean;
}

/** Everything a page needs to draw itself; `feed`: the newest decisions, oldest first. */
export interface StatusSnapshot {
  readonly gateway: GatewayLine;
  readonly actuators: readonly ActuatorCard[];
  readonly feed: readonly Decision[];
}

/** The event streams: open, the most served at once, and how many were closed for reading too slowly. */
export interface StreamCounts {
  readonly open: number;
  readonly max: number;
  readonly droppedSlow: number;
}

/** The body of GET /api/status. */
export interface StatusBody extends StatusSnapshot {
  readonly streams: StreamCounts;
}

/** The events of /api/events by name, each with what its `data` line holds. */
export interface StatusEvents {
  /** First on every stream: the page loads /api/status on it, and needs only changes after. */
  readonly hello: { readonly gateway: GatewayLine };
  /** Decisions since the last flush, oldest first; `skipped`: left out because too many came in one flush. */
  readonly decisions: { readonly decisions: readonly Decision[]; readonly skipped: number };
  /** A card that changed. */
  readonly actuator: ActuatorCard;
  readonly gateway: GatewayLine;
}

/** The body of GET /api/actuators/<id>/audit. */
export type AuditAnswer = { readonly actuator: string } & AuditPage;

/** The body of every refusal of the page's routes (4xx, 503). */
export interface ApiError {
  readonly error: { readonly code: string; readonly message: string };
}
