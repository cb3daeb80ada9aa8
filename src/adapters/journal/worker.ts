/**
 * The journal's writer thread: a worker_threads Worker that owns the SQLite journal
 * (sqlite.ts, opened, loaded, written and closed here), so that nothing the event loop does
 * waits for the disk. Why a worker and what runs where: worker-client.ts.
 *
 * Requests arrive in order on one port. Open, load, commit and close are synchronous for
 * the caller: their answer goes to a port of its own and the caller, blocked in
 * Atomics.wait on `signal`, is woken. Asynchronous commits are answered on `answers`, in
 * the order they were made, once durable.
 */
import { parentPort, workerData, type MessagePort } from "node:worker_threads";
import type { JournalEntry } from "../../shell/ports.ts";
import { openSqliteJournal, type SqliteJournal, type SqliteJournalOptions } from "./sqlite.ts";

/** What a worker is started with (workerData). */
export interface WorkerStart {
  readonly journalWorker: true;
  /** The journal's options, as far as they cross a thread (no functions). */
  readonly options: Omit<SqliteJournalOptions, "fdatasync" | "wallNowMs">;
  readonly requests: MessagePort;
  readonly answers: MessagePort;
  readonly syncAnswers: MessagePort;
  /** Set to 1 and notified when a synchronous answer is on `syncAnswers`. */
  readonly signal: Int32Array;
}

export type Request =
  | { readonly op: "open" }
  | { readonly op: "load" }
  | { readonly op: "commit"; readonly entries: readonly JournalEntry[] }
  | { readonly op: "close" }
  | { readonly op: "group" }
  | { readonly op: "setGroup"; readonly name: string | null }
  | { readonly op: "commitAsync"; readonly id: number; readonly entries: readonly JournalEntry[] };

/** An error as it crosses the thread: rebuilt by the client as the same class. */
export interface WireError {
  readonly name: string;
  readonly message: string;
  readonly code?: string | undefined;
}

export type SyncAnswer = { readonly ok: true; readonly value?: unknown } | { readonly ok: false; readonly error: WireError };
export type AsyncAnswer =
  { readonly id: number; readonly ok: true } | { readonly id: number; readonly ok: false; readonly error: WireError };

export function toWire(error: unknown): WireError {
  if (!(error instanceof Error)) return { name: "Error", message: String(error) };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, code: typeof code === "string" ? code : undefined };
}

/** Answers a synchronous request and wakes the caller. */
export function answerSync(start: Pick<WorkerStart, "syncAnswers" | "signal">, answer: SyncAnswer): void {
  start.syncAnswers.postMessage(answer);
  Atomics.store(start.signal, 0, 1);
  Atomics.notify(start.signal, 0);
}

function serve(start: WorkerStart): void {
  let journal: SqliteJournal | null = null;
  const opened = (): SqliteJournal => {
    if (journal === null) throw new Error("journal worker: the journal is not open");
    return journal;
  };
  const sync = (fn: () => unknown): void => {
    let answer: SyncAnswer;
    try {
      answer = { ok: true, value: fn() };
    } catch (error) {
      answer = { ok: false, error: toWire(error) };
    }
    answerSync(start, answer);
  };
  start.requests.on("message", (request: Request) => {
    switch (request.op) {
      case "open":
        return sync(() => {
          journal = openSqliteJournal(start.options);
          return { fresh: journal.fresh, settings: journal.settings() };
        });
      case "load":
        return sync(() => {
          const snapshots = [...opened().load()];
          return { snapshots, lostHistory: opened().lostHistory };
        });
      case "commit":
        return sync(() => opened().commit(request.entries));
      case "group":
        return sync(() => opened().group());
      case "setGroup":
        return sync(() => opened().setGroup(request.name));
      case "close":
        return sync(() => {
          try {
            journal?.close();
          } finally {
            start.requests.close(); // nothing more comes: the thread ends once the pool's syncs return
          }
        });
      case "commitAsync": {
        const { id } = request;
        let done: Promise<void>;
        try {
          done = opened().commitAsync(request.entries);
        } catch (error) {
          done = Promise.reject(error);
        }
        done.then(
          () => start.answers.postMessage({ id, ok: true } satisfies AsyncAnswer),
          (error: unknown) => start.answers.postMessage({ id, ok: false, error: toWire(error) } satisfies AsyncAnswer),
        );
      }
    }
  });
}

// Only as the worker's entry: a module importing this one (or a test runner's own thread) serves nothing.
if (parentPort !== null && (workerData as Partial<WorkerStart> | null)?.journalWorker === true) serve(workerData as WorkerStart);
