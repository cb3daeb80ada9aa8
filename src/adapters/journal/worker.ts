/**
 * The SQLite journal with its commits off the event loop. A worker thread (sqlite-worker.ts)
 * owns the one connection, and with it the exclusive lock, from open to close: open and
 * `load()` run there too, so the lock is never released between loading and committing (a
 * second gateway cannot slip in), and nothing but the worker ever touches the file.
 *
 * - `commitAsync` posts the batch and resolves when the worker has committed it (fsync
 *   done). The worker handles batches one at a time in the order they were posted, and
 *   acknowledges them in that order. Its first failure poisons it: that batch and every
 *   later one reject with that error. The {@link GroupCommitter} keeps one batch in flight
 *   and sends what accumulated meanwhile as the next transaction.
 * - `load()`, `commit()`, `settings()` and `close()` keep the synchronous {@link Journal}
 *   contract: the main thread blocks (Atomics.wait) until the worker answers. They are for
 *   start-up, shutdown and tests; `close()` first lets every commit posted before it finish
 *   (the requests are ordered), then closes the connection, then delivers those commits'
 *   acknowledgements before it returns.
 *
 * The worker runs from the compiled build (dist/, plain .js) or from the TypeScript sources
 * (then through sqlite-worker-tsx.mjs, which registers tsx's loader in the worker).
 */
import { fileURLToPath } from "node:url";
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";
import type { DurableSnapshot } from "../../core/actuator.ts";
import type { Journal, JournalEntry, JournalWriter } from "../../shell/ports.ts";
import { JournalError } from "../../shell/ports.ts";
import { assertRecentLimit, assertStorable } from "./records.ts";
import type { SqliteJournalOptions, SqliteJournalSettings } from "./sqlite.ts";
import type { CommitAck, Request, SyncReply, WorkerData } from "./worker-protocol.ts";
import { deserializeError } from "./worker-protocol.ts";

export interface WorkerJournalOptions extends SqliteJournalOptions {
  /** How long a synchronous request (open, load, close...) may wait for the worker. */
  readonly syncTimeoutMs?: number;
}

/** Running from the TypeScript sources (tsx, vitest) rather than the compiled build. */
const SOURCE = import.meta.url.endsWith(".ts");
// From the sources a small .mjs bootstrap registers tsx's loader inside the worker first.
const WORKER_URL = new URL(SOURCE ? "./sqlite-worker-tsx.mjs" : "./sqlite-worker.js", import.meta.url);

export class WorkerJournal implements Journal, JournalWriter {
  readonly path: string;
  readonly recentLimit: number;
  readonly fresh: boolean;
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #syncPort: MessagePort;
  readonly #replies: Int32Array;
  readonly #timeoutMs: number;
  readonly #pending = new Map<number, { resolve: () => void; reject: (e: unknown) => void }>();
  #nextId = 1;
  #loaded = false;
  #closed = false;
  #failure: Error | null = null;
  #exited: string | null = null;

  constructor(options: WorkerJournalOptions) {
    assertRecentLimit(options.recentLimit);
    this.path = options.path;
    this.recentLimit = options.recentLimit;
    this.#timeoutMs = options.syncTimeoutMs ?? 60_000;
    const requests = new MessageChannel();
    const sync = new MessageChannel();
    const signal = new SharedArrayBuffer(4);
    this.#replies = new Int32Array(signal);
    this.#port = requests.port1;
    this.#syncPort = sync.port1;
    const { path, recentLimit, busyTimeoutMs } = options;
    const data: WorkerData = {
      options: { path, recentLimit, ...(busyTimeoutMs !== undefined ? { busyTimeoutMs } : {}) },
      port: requests.port2,
      syncPort: sync.port2,
      signal,
    };
    this.#worker = new Worker(fileURLToPath(WORKER_URL), {
      workerData: data,
      transferList: [requests.port2, sync.port2],
      execArgv: [],
      name: "fencegate-journal",
    });
    this.#worker.unref();
    this.#worker.on("error", (error) => this.#lost(`the journal worker failed: ${error.message}`));
    this.#worker.on("exit", (code) => {
      this.#exited = `the journal worker exited (code ${code})`;
      if (!this.#closed) this.#lost(this.#exited);
    });
    this.#port.on("message", (ack: CommitAck) => this.#acknowledged(ack));
    this.#port.unref();
    let opened: SyncReply;
    try {
      opened = this.#syncRequest(null, "open");
    } catch (error) {
      void this.#worker.terminate();
      throw error;
    }
    if (!opened.ok) {
      void this.#worker.terminate();
      this.#closed = true;
      throw deserializeError(opened.error);
    }
    this.fresh = opened.fresh === true;
  }

  load(): ReadonlyMap<string, DurableSnapshot> {
    if (this.#closed) throw new Error("journal: load() on a closed journal");
    const reply = this.#syncRequest({ op: "load" }, "load");
    if (!reply.ok) throw deserializeError(reply.error);
    this.#loaded = true;
    return reply.snapshots!;
  }

  /** Synchronous commit (tests, tools): blocks until the worker has committed it. */
  commit(entries: readonly JournalEntry[]): void {
    this.#assertCommittable();
    assertStorable(entries);
    if (this.#failure !== null) throw this.#failure;
    if (entries.length === 0) return;
    const reply = this.#syncRequest({ op: "commitSync", entries }, "commit");
    if (!reply.ok) throw deserializeError(reply.error);
  }

  commitAsync(entries: readonly JournalEntry[]): Promise<void> {
    try {
      this.#assertCommittable();
      if (this.#failure !== null) throw this.#failure;
      assertStorable(entries);
    } catch (error) {
      // Refused before it reached the worker; later batches must not commit either.
      this.#failure ??= error instanceof Error ? error : new Error(String(error));
      return Promise.reject(error);
    }
    const id = this.#nextId++;
    return new Promise<void>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      if (this.#pending.size === 1) this.#port.ref(); // an unacknowledged commit keeps the process alive
      this.#port.postMessage({ op: "commit", id, entries } satisfies Request);
    });
  }

  /** What the worker's connection runs with (blocks for the commits before it). */
  settings(): SqliteJournalSettings {
    if (this.#closed) throw new Error("journal: settings() on a closed journal");
    const reply = this.#syncRequest({ op: "settings" }, "settings");
    if (!reply.ok) throw deserializeError(reply.error);
    return reply.settings!;
  }

  /** Why the journal cannot commit (its worker failed or exited, a commit failed), or null. Never blocks. */
  problem(): string | null {
    if (this.#failure !== null) return `a commit failed: ${this.#failure.message}`;
    if (this.#exited !== null && !this.#closed) return this.#exited;
    return null;
  }

  /** Commits in flight, posted and not yet acknowledged. */
  get inFlight(): number {
    return this.#pending.size;
  }

  /**
   * Lets every commit posted before it finish, closes the connection (and the lock), and
   * settles those commits' promises before returning.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    let problem: unknown = null;
    if (this.#exited === null) {
      try {
        const reply = this.#syncRequest({ op: "close" }, "close");
        if (!reply.ok) problem = deserializeError(reply.error);
      } catch (error) {
        problem = error;
      }
      // Every acknowledgement was posted before the close reply: deliver them now.
      for (let m = receiveMessageOnPort(this.#port); m !== undefined; m = receiveMessageOnPort(this.#port)) this.#acknowledged(m.message as CommitAck);
    }
    this.#lost("journal: the journal was closed before this commit was acknowledged");
    this.#port.close();
    this.#syncPort.close();
    if (problem !== null) {
      void this.#worker.terminate();
      throw problem;
    }
  }

  #assertCommittable(): void {
    if (this.#closed) throw new Error("journal: commit() on a closed journal");
    if (!this.#loaded) throw new Error("journal: commit() before load(); load() checks the journal and must come first");
  }

  #acknowledged(ack: CommitAck): void {
    const waiter = this.#pending.get(ack.id);
    if (waiter === undefined) return;
    this.#pending.delete(ack.id);
    if (this.#pending.size === 0) this.#port.unref();
    if (ack.error === undefined) return waiter.resolve();
    const error = deserializeError(ack.error);
    this.#failure ??= error;
    waiter.reject(error);
  }

  /** The worker is gone: nothing unacknowledged may be trusted. */
  #lost(why: string): void {
    const error = new Error(why);
    if (!this.#closed) this.#failure ??= error;
    const waiters = [...this.#pending.values()];
    this.#pending.clear();
    this.#port.unref();
    for (const w of waiters) w.reject(this.#failure ?? error);
  }

  #syncRequest(request: Request | null, what: string): SyncReply {
    if (request !== null) this.#port.postMessage(request);
    const deadline = performance.now() + this.#timeoutMs;
    for (;;) {
      // Read the count before looking: a reply posted after the look has changed it, so the
      // wait below returns at once instead of missing it.
      const count = Atomics.load(this.#replies, 0);
      const m = receiveMessageOnPort(this.#syncPort);
      if (m !== undefined) return m.message as SyncReply;
      const left = deadline - performance.now();
      if (left <= 0) {
        throw new JournalError("JOURNAL_UNREADABLE", `${this.path}: the journal worker did not answer ${what} within ${this.#timeoutMs} ms.`);
      }
      // Slices: the worker cannot notify us if it died.
      Atomics.wait(this.#replies, 0, count, Math.min(left, 100));
    }
  }
}

/** Opens the journal in its worker thread; throws {@link JournalError} as {@link openSqliteJournal} does. */
export function openWorkerJournal(options: WorkerJournalOptions): WorkerJournal {
  return new WorkerJournal(options);
}
