import type { ErrorBody, EventBody, EventType, Fence, LeaseView, PointValues, Reply } from "../../packages/protocol/src/index.ts";

// The wire's types, which the core decides in: packages/protocol/src/messages.ts.
export type { ErrorBody, EventType, Fence, LeaseView, Reply };

/** A live lease. Times are monotonic milliseconds supplied by the shell, never wall time. */
export interface Lease {
  readonly holder: string;
  readonly token: number;
  readonly ttlMs: number;
  readonly expiresAtMs: number;
  /** Authenticated actuators: the per-lease MAC key, handed out with the grant only. */
  readonly secret?: string;
  /** Authenticated actuators: the highest counter a signed renew or release of this lease carried. */
  readonly counter?: number;
}

/**
 * What a request under an authenticated lease carries besides its fields
 * (packages/protocol/src/signature.ts): its MAC, the actuator id the MAC covers, and for a
 * renew or release its counter.
 */
export interface Signature {
  readonly actuator: string;
  readonly mac: string | null;
  readonly counter?: number | null;
}

export type { PointValues };

export interface PointSpec {
  readonly writable: boolean;
  readonly min: number;
  readonly max: number;
}

export type ExpiryPolicy = { readonly kind: "hold" } | { readonly kind: "safe"; readonly set: PointValues };

export interface CoreLimits {
  readonly minTtlMs: number;
  readonly maxTtlMs: number;
  /** Commands waiting behind the one at the device; beyond this: OVERLOADED. */
  readonly queueLimit: number;
  /** Accepted commands remembered to answer retries with DUPLICATE. */
  readonly recentLimit: number;
  /**
   * The gateway's own safe-value write is retried until the device confirms it: the first
   * retry after `safeRetryMinMs`, doubling up to `safeRetryMaxMs` between attempts.
   */
  readonly safeRetryMinMs: number;
  readonly safeRetryMaxMs: number;
}

export interface ActuatorConfig {
  readonly points: Readonly<Record<string, PointSpec>>;
  readonly expiryPolicy: ExpiryPolicy;
  readonly limits: CoreLimits;
}

/** How an accepted command ended. `null` in a record means: intent stored, no outcome yet. */
export type Outcome =
  | { readonly kind: "applied"; readonly applied: PointValues }
  | {
      readonly kind: "failed";
      readonly code: "DEVICE_REJECTED" | "DEVICE_ERROR" | "DEVICE_UNAVAILABLE" | "OUTCOME_UNKNOWN";
      readonly message: string;
      readonly modbusCode?: number;
    };

export interface CommandRecord {
  readonly holder: string;
  readonly token: number;
  readonly seq: number;
  readonly set: PointValues;
  readonly outcome: Outcome | null;
}

/** The shell's handle for where a reply goes; opaque to the core. `null`: nobody waits. */
export type ReplyRef = number | null;

export interface QueuedCommand {
  readonly ref: ReplyRef;
  readonly holder: string;
  readonly token: number;
  readonly seq: number;
  readonly set: PointValues;
  readonly deadlineAtMs: number;
  /** The gateway's own safe-value write: fenced like any other, but needs no lease. */
  readonly internal: boolean;
}

/**
 * The gateway's own write of the safe values (expiry policy "safe"), owed from the moment a
 * lease ends (expiry, restart, shutdown, a device fence ahead) until the device confirms it
 * or a newer grant supersedes it. Attempts under one token are (token, 0), (token, 1), ...
 */
export interface SafeWrite {
  /** The gateway's own token for it, granted (durably) like a lease's. */
  readonly token: number;
  /** The seq of the next attempt under `token`. */
  readonly seq: number;
  /** Attempts sent so far, under every token: the backoff grows with them. */
  readonly attempts: number;
  /** Monotonic time before which the next attempt is not sent (backoff after a failure). */
  readonly notBeforeMs: number;
  /**
   * The gateway group never confirmed `token`'s grant: no attempt goes out under it (another
   * gateway, or this one after a restart, may grant it again). The next attempt takes a
   * fresh token first, durable before it is sent.
   */
  readonly unconfirmed?: true;
}

export interface ActuatorState {
  /** Durable: the highest token ever granted for this actuator. */
  readonly highestGranted: number;
  /** Durable: who was granted `highestGranted`, or null when it came from a device's fence or a floor. */
  readonly lastGrantHolder: string | null;
  /** Durable: see {@link Fence}. */
  readonly fence: Fence;
  /** Volatile: gone on restart, by design (a restart is uncertainty). */
  readonly lease: Lease | null;
  readonly online: boolean;
  readonly queue: readonly QueuedCommand[];
  readonly inFlight: QueuedCommand | null;
  /** Durable, bounded, oldest first. */
  readonly recent: readonly CommandRecord[];
  /** Volatile: the safe write owed, if any (decided again from the durable parts at restart). */
  readonly safeWrite: SafeWrite | null;
}

/**
 * What the journal stores, in one ordered stream. Grants (`granted`, `fenceObserved`) are
 * durable before anything that depends on them; commands' `intent` and `outcome` are their
 * asynchronous audit trail (see {@link Effect}).
 */
export type JournalRecord =
  | { readonly type: "granted"; readonly holder: string; readonly token: number }
  | {
      readonly type: "intent";
      readonly holder: string;
      readonly token: number;
      readonly seq: number;
      readonly set: PointValues;
    }
  | { readonly type: "outcome"; readonly token: number; readonly seq: number; readonly outcome: Outcome }
  | { readonly type: "fenceObserved"; readonly token: number; readonly seq: number | null };

/** One decision for `B/A/events`; the shell adds its time. */
export type CoreEvent = EventBody;

/** A record that raises the highest token granted or the fence: durable before it is relied on. */
export type GrantRecord = Extract<JournalRecord, { readonly type: "granted" | "fenceObserved" }>;
/** A command's record: what was sent to the device and how it ended. */
export type AuditRecord = Extract<JournalRecord, { readonly type: "intent" | "outcome" }>;

/**
 * Effects, in the order the shell must carry them out. A `persist` (a grant) must be durable
 * before any effect after it in the same list is performed: that is how "durable before the
 * grant is sent" is kept. An `audit` record is handed to the journal in its place in the
 * order and is not waited for: a command never waits for the disk (docs/mqtt-api.md, "What is durable"). That is safe
 * because every lease ends at restart and the next grant is above every token granted
 * before (durable before its reply), so no command under a token from before a crash can be
 * accepted again, whatever its seq; the seq fence matters only inside one live lease, where
 * memory holds it. A crash may lose the newest audit records: a retry of such a command then
 * gets a lease error (STALE_TOKEN, LEASE_EXPIRED), not DUPLICATE.
 */
export type Effect =
  | { readonly kind: "persist"; readonly record: GrantRecord }
  | { readonly kind: "audit"; readonly record: AuditRecord }
  | {
      readonly kind: "deviceWrite";
      readonly holder: string;
      readonly token: number;
      readonly seq: number;
      readonly set: PointValues;
    }
  | { readonly kind: "reply"; readonly ref: ReplyRef; readonly reply: Reply }
  | { readonly kind: "event"; readonly event: CoreEvent }
  | { readonly kind: "stateChanged" };

interface Timed {
  readonly nowMs: number;
}

export type Input =
  | (Timed & {
      readonly type: "acquire";
      readonly ref: ReplyRef;
      readonly holder: string;
      readonly ttlMs: number;
      /** Authenticated actuators: a fresh random secret from the shell, kept if granted. */
      readonly secret?: string | undefined;
    })
  | (Timed & {
      readonly type: "renew";
      readonly ref: ReplyRef;
      readonly holder: string;
      readonly token: number;
      readonly signature?: Signature;
    })
  | (Timed & {
      readonly type: "release";
      readonly ref: ReplyRef;
      readonly holder: string;
      readonly token: number;
      readonly signature?: Signature;
    })
  | (Timed & {
      readonly type: "command";
      readonly ref: ReplyRef;
      readonly holder: string;
      readonly token: number;
      readonly seq: number;
      readonly set: PointValues;
      readonly deadlineMs: number;
      readonly signature?: Signature;
      /** Set when the journal is too far behind to take this command's records: why, for the OVERLOADED refusal. */
      readonly journalBehind?: string | undefined;
    })
  | (Timed & { readonly type: "deviceResult"; readonly token: number; readonly seq: number; readonly outcome: Outcome })
  | (Timed & { readonly type: "tick" })
  /** The gateway (re)started over this state: every lease granted before has ended. */
  | (Timed & { readonly type: "restart" })
  /** The gateway is stopping: the live lease ends now. */
  | (Timed & { readonly type: "shutdown" })
  | (Timed & { readonly type: "link"; readonly online: boolean })
  | (Timed & { readonly type: "deviceFence"; readonly token: number; readonly seq: number | null })
  /**
   * Gateway group: this gateway takes the actuator over. Every lease ends; the gateway takes a
   * token of its own above `floor` (the group's counter and the device's fence) and above
   * everything it knows, which the shell then writes to the device as a fence raise.
   */
  | (Timed & { readonly type: "takeover"; readonly floor: number })
  /** Gateway group: this gateway is no longer active. Every lease ends; nothing queued is sent. */
  | (Timed & { readonly type: "stepDown" })
  /**
   * Gateway group: the grant of `token` could not be made durable in the group (`reason`); its
   * lease, if live, ends. `withheld` are the effects of the granting step after the grant, which
   * the shell did not carry out: the core decides what becomes of them.
   */
  | (Timed & { readonly type: "grantFailed"; readonly token: number; readonly reason: string; readonly withheld: readonly Effect[] });

export interface StepResult {
  readonly state: ActuatorState;
  readonly effects: readonly Effect[];
}
