/**
 * The small interfaces the shell talks to. Each has a real adapter (src/adapters) and an
 * in-memory or simulated one, so the same core and pipeline run in the daemon, the tests
 * and the seeded simulator.
 */
import type { DurableSnapshot } from "../core/actuator.ts";
import type { CoreEvent, Fence, JournalRecord, Outcome, PointValues, Reply } from "../core/types.ts";

export interface JournalEntry {
  readonly actuator: string;
  readonly record: JournalRecord;
}

export interface Journal {
  /**
   * Reads every actuator's durable state. Intents that never got an outcome are recorded
   * (durably) as OUTCOME_UNKNOWN and returned so. Throws {@link JournalError} when the
   * journal cannot be read or is inconsistent: the daemon must not start on a guess.
   */
  load(): ReadonlyMap<string, DurableSnapshot>;
  /** One atomic, durable commit of all entries, in order. Returns only once they are synced. */
  commit(entries: readonly JournalEntry[]): void;
  close(): void;
}

/**
 * A journal whose commits become durable off the event loop (the SQLite journal's fdatasync
 * runs on libuv's thread pool). Batches commit in the order of the calls, each as one
 * atomic transaction; a promise resolves only after its batch and every earlier one are
 * synced. A failed commit or sync poisons the writer: that batch and every later one reject.
 */
export interface JournalWriter {
  commitAsync(entries: readonly JournalEntry[]): Promise<void>;
}

export function isJournalWriter(journal: Journal): journal is Journal & JournalWriter {
  return typeof (journal as Partial<JournalWriter>).commitAsync === "function";
}

export class JournalError extends Error {
  override readonly name = "JournalError";
  constructor(
    readonly code: "JOURNAL_UNREADABLE" | "JOURNAL_INCONSISTENT" | "JOURNAL_NEWER_VERSION" | "JOURNAL_LOST_HISTORY" | "JOURNAL_MISSING",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${code}: ${message}`, options);
  }
}

/**
 * The device answered, but not with something usable: a malformed frame, or an exception
 * to a read. The message says what, for the state and the log. Answers like this count
 * against the device's health like missing ones.
 */
export class DeviceAnswerError extends Error {
  override readonly name: string = "DeviceAnswerError";
}

/**
 * The device on the link is not the one the configuration describes (a fenced actuator
 * whose identity block is missing or another profile): nothing is written to it and no
 * lease is granted until it identifies right. The message says what it reported.
 */
export class DeviceMismatchError extends Error {
  override readonly name = "DeviceMismatchError";
}

export interface DeviceCommand {
  readonly holder: string;
  readonly token: number;
  readonly seq: number;
  readonly set: PointValues;
}

/** One actuator on a bus. Implementations serialise access to the bus themselves. */
export interface DevicePort {
  /** One transaction carrying the command. Resolves with the outcome; never rejects. */
  write(command: DeviceCommand): Promise<Outcome>;
  /**
   * Reads the live points (a value may be NaN or infinite: an f32 register says so; the
   * shell reports it as a point fault). Rejects when the device cannot be reached, with
   * {@link DeviceAnswerError} when its answer is unusable, with {@link DeviceMismatchError}
   * when it is not the device configured.
   */
  read(): Promise<PointValues>;
  /** The fence the device itself stores (fenced profile), or null for a plain device. Rejects like {@link read}. */
  readFence(): Promise<Fence | null>;
  /**
   * Fenced profile 1.1: raises the device's own fence to `token` without moving anything.
   * Only a gateway group's takeover needs it; adapters that never run in a group leave it out.
   */
  raiseFence?(token: number): Promise<FenceRaise>;
}

/**
 * How a fence raise ended. `refused`: the device holds a newer token already (0x46), so
 * another gateway took over; `unsupported`: a device without the raise (profile 1.0, or
 * plain); `failed`: not confirmed (link down, timeout, another exception).
 */
export type FenceRaise = { readonly kind: "raised" } | { readonly kind: "refused" | "unsupported" | "failed"; readonly message: string };

/** Whether a granted token is durable in the gateway group (etcd), checked against leadership. */
export type GrantCommit = { readonly ok: true } | { readonly ok: false; readonly stale: boolean; readonly message: string };

/**
 * The gateway group as the shell sees it (a gateway on its own has none). `stale` in a
 * failed commit means another gateway leads: this one must step down.
 */
export interface GroupPort {
  /** Commits `token` as the group's highest for `actuator`, only while this gateway leads. */
  commitGrant(actuator: string, token: number): Promise<GrantCommit>;
  /** The group's highest granted token for `actuator` (0: none yet). */
  readToken(actuator: string): Promise<number>;
  /** Whether a frame may be sent to a device now: checked before every one. */
  mayDriveDevices(): boolean;
  /** A device or etcd showed that another gateway leads. */
  stale(reason: string): void;
}

/**
 * Randomness as the shell sees it: the lease secrets of authenticated actuators. The daemon's
 * draws on the platform's; the simulator's is seeded, so a seed replays its secrets too.
 */
export interface Random {
  /** `n` uniformly random bytes. */
  bytes(n: number): Uint8Array;
}

/** Time as the shell sees it. Decisions use only the monotonic clock. */
export interface Clock {
  monotonicMs(): number;
  /** For humans reading states and events; never used in a decision. */
  wallNow(): Date;
}

export interface Scheduler {
  /** Calls `fn` once at monotonic time `atMs` (or soon after). Returns a cancel function. */
  at(atMs: number, fn: () => void): () => void;
  /** Calls `fn` after the current batch of I/O callbacks: the group-commit window. */
  defer(fn: () => void): void;
}

export interface StateView {
  readonly actuator: string;
  readonly online: boolean;
  readonly lease: { readonly holder: string; readonly token: number; readonly expiresInMs: number } | null;
  readonly fence: Fence;
  /** Finite values only: a point whose reading is not a number is in `pointFaults` instead. */
  readonly points: PointValues;
  /** How long ago the device last answered a read of its points; null: not since the gateway started. */
  readonly pointsAgeMs: number | null;
  /** The gateway serving it: its `B/gateway/<id>/status` says whether this state is current. */
  readonly gateway: string;
  /** The gateway's own safe-value write, while it is owed (expiry policy "safe"). */
  readonly safeWrite: { readonly token: number; readonly attempts: number; readonly set: PointValues } | null;
  /** Points whose last reading is not a finite number, with what it was (extension). */
  readonly pointFaults: Readonly<Record<string, string>>;
  /** Why the actuator is offline or cannot be leased, when the gateway knows (extension). */
  readonly problem: string | null;
  /** Wall-clock time of the snapshot: informative only, no decision depends on it. */
  readonly at: Date;
}

/** A core decision's reply, or the answer to a `read`. */
export type OutboundReply = Reply | { readonly ok: true; readonly state: StateView };

/** Where the shell's outward messages go (the MQTT adapter, or a test's recorder). */
export interface Outbox {
  reply(ref: number, reply: OutboundReply): void;
  event(actuator: string, event: CoreEvent & { readonly at: Date }): void;
  state(view: StateView): void;
  /**
   * Every view `state` could have been given, also those it is not, for lack of a change of
   * substance (a renewal moves only the lease's expiry): the status page's countdowns.
   * Called at the same points in the order as `state`, so never ahead of the journal.
   */
  observe?(view: StateView): void;
}
