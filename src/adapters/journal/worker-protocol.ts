/**
 * The messages between {@link WorkerJournal} (main thread) and its worker thread
 * (sqlite-worker.ts). Requests go on one port, in order; the worker handles them one at a
 * time in that order. Replies to `commit` go back on the same port (asynchronously), replies
 * to the synchronous requests on a second port the main thread reads while it blocks.
 */
import type { MessagePort } from "node:worker_threads";
import type { DurableSnapshot } from "../../core/actuator.ts";
import type { JournalEntry } from "../../shell/ports.ts";
import { JournalError } from "../../shell/ports.ts";
import type { SqliteJournalOptions, SqliteJournalSettings } from "./sqlite.ts";

export interface WorkerData {
  readonly options: SqliteJournalOptions;
  /** Requests from the main thread; `commit` acknowledgements back to it. */
  readonly port: MessagePort;
  /** Replies to the synchronous requests (open, load, sync commit, settings, close). */
  readonly syncPort: MessagePort;
  /** Int32Array over it: [0] counts sync replies, for Atomics.wait. */
  readonly signal: SharedArrayBuffer;
}

export type Request =
  | { readonly op: "commit"; readonly id: number; readonly entries: readonly JournalEntry[] }
  | { readonly op: "commitSync"; readonly entries: readonly JournalEntry[] }
  | { readonly op: "load" }
  | { readonly op: "settings" }
  | { readonly op: "close" };

export type CommitAck = { readonly id: number; readonly error?: SerializedError };

export type SyncReply =
  | { readonly ok: true; readonly fresh?: boolean; readonly snapshots?: ReadonlyMap<string, DurableSnapshot>; readonly settings?: SqliteJournalSettings }
  | { readonly ok: false; readonly error: SerializedError };

export interface SerializedError {
  readonly name: string;
  readonly message: string;
  readonly code?: string;
  readonly stack?: string;
}

export function serializeError(error: unknown): SerializedError {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return { name: error.name, message: error.message, ...(typeof code === "string" ? { code } : {}), ...(error.stack ? { stack: error.stack } : {}) };
  }
  return { name: "Error", message: String(error) };
}

/** The same class (JournalError, RangeError) and message as in the worker. */
export function deserializeError(e: SerializedError): Error {
  let error: Error;
  if (e.name === "JournalError" && e.code !== undefined && e.message.startsWith(`${e.code}: `)) {
    error = new JournalError(e.code as JournalError["code"], e.message.slice(e.code.length + 2));
  } else if (e.name === "RangeError") error = new RangeError(e.message);
  else if (e.name === "TypeError") error = new TypeError(e.message);
  else {
    error = new Error(e.message);
    if (e.name !== "Error") Object.defineProperty(error, "name", { value: e.name, configurable: true, writable: true });
    if (e.code !== undefined) (error as Error & { code?: string }).code = e.code;
  }
  if (e.stack !== undefined) error.stack = `${error.stack ?? ""}\n    --- in the journal worker ---\n${e.stack}`;
  return error;
}
