/**
 * The journal as the daemon uses it: the SQLite journal (sqlite.ts) runs whole in a writer
 * thread of its own (worker.ts), and this is its stand-in on the event loop.
 *
 * Why a thread: an fdatasync on libuv's pool was not enough. SQLite's writes to the -wal,
 * and its wal-index in the mmapped -shm, run on the thread that calls it; on a frozen or
 * stalled disk (fsfreeze, an SD card's worst moments) that thread sits in the kernel
 * (ext4_page_mkwrite) until the disk comes back, and if it is the event loop, no other
 * actuator's command is answered, /healthz does not answer, and the stall timer cannot
 * fire. A worker owning the connection keeps every disk access of the journal (open,
 * load, commits, checkpoints, the mark, close) off the event loop: the loop only posts
 * records and reads answers. (Another process would do the same at the cost of a second
 * Node; an async SQLite binding would still write the -shm from its pool threads, with no
 * way to see a stall but the same wait.) See docs/deploy.md, "The journal's disk".
 *
 * Open, load, `commit` and close wait for the thread's answer (Atomics.wait): at the
 * start and the end nothing else runs. `commitAsync` is what the group committer uses
 * while serving: grants await it, commands' audit records are queued and nobody waits.
 *
 * A stall is seen from here, because the thread itself may be stuck in the kernel: a
 * commit not answered within `stallReportMs` makes {@link JournalThread.problem} say so
 * (/healthz 503, the status page) and logs a warning, and a line when the disk answers
 * again. The exit on a stall stays the group committer's (journal.commitStallMs), whose
 * timer now runs on a free event loop.
 *
 * The limit of a thread: its fault on the frozen -shm holds the process's mappings, so while
 * it lasts the event loop waits too if it starts a process (fork copies the mappings: hence
 * the watchdog's relay, started before serving), or, on a kernel without per-VMA locks
 * (before 6.4, 32-bit ARM), if V8 maps memory. A writer process would not share them
 * (docs/deploy.md).
 */
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";
import type { Logger } from "pino";
import type { DurableSnapshot } from "../../core/actuator.ts";
import type { Journal, JournalEntry, JournalWriter } from "../../shell/ports.ts";
import { JournalError } from "../../shell/ports.ts";
import type { SqliteJournalOptions, SqliteJournalSettings } from "./sqlite.ts";
import type { AsyncAnswer, Request, SyncAnswer, WireError, WorkerStart } from "./worker.ts";

export interface JournalThreadOptions extends Omit<SqliteJournalOptions, "fdatasync" | "wallNowMs"> {
  /** A commit not answered this long is reported as a stalled disk (problem(), the log). */
  readonly stallReportMs: number;
  readonly log?: Pick<Logger, "warn" | "info"> | undefined;
}

/**
 * When a commit not yet back is reported as a stall: a quarter of journal.commitStallMs
 * (when the daemon stops), at most 2 s; an SD card's slowest fdatasyncs, a few hundred
 * milliseconds, are not a stall.
 */
export function stallReportMs(commitStallMs: number): number {
  return Math.min(commitStallMs / 4, 2000);
}

interface Pending {
  readonly sentAtMs: number;
  readonly records: number;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

/**
 * The worker's entry: the bundle's own file beside this chunk (dist/journal-worker.js,
 * bin/dist.mjs), or from the sources the bootstrap that loads worker.ts through tsx.
 */
function workerEntry(): URL {
  return import.meta.url.endsWith(".ts") ? new URL("./worker-boot.mjs", import.meta.url) : new URL("./journal-worker.js", import.meta.url);
}

export class JournalThread implements Journal, JournalWriter {
  readonly path: string;
  readonly recentLimit: number;
  /** True when this open created the journal (there was no file). */
  readonly fresh: boolean;
  /** What committed history is missing, found by load() (with acceptLostHistory), or null. */
  lostHistory: string | null = null;
  readonly #settings: SqliteJournalSettings;
  readonly #worker: Worker;
  readonly #requests: MessagePort;
  readonly #answers: MessagePort;
  readonly #syncAnswers: MessagePort;
  readonly #signal = new Int32Array(new SharedArrayBuffer(4));
  readonly #stallReportMs: number;
  readonly #log: JournalThreadOptions["log"];
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #closed = false;
  /** The first failure reported by the thread (or its end): every later commit is refused with it. */
  #failure: Error | null = null;
  #stallTimer: NodeJS.Timeout | null = null;
  /** A stall was reported and has not ended. */
  #stalled = false;
  /** The thread ended or failed: nothing more would answer. */
  #gone = false;

  /** Starts the thread and opens the journal in it; throws {@link JournalError} as openSqliteJournal does. */
  constructor(options: JournalThreadOptions) {
    const { stallReportMs, log, ...journalOptions } = options;
    this.path = options.path;
    this.recentLimit = options.recentLimit;
    this.#stallReportMs = stallReportMs;
    this.#log = log;
    const requests = new MessageChannel();
    const answers = new MessageChannel();
    const syncAnswers = new MessageChannel();
    this.#requests = requests.port1;
    this.#answers = answers.port1;
    this.#syncAnswers = syncAnswers.port1;
    const start: WorkerStart = {
      journalWorker: true,
      options: journalOptions,
      requests: requests.port2,
      answers: answers.port2,
      syncAnswers: syncAnswers.port2,
      signal: this.#signal,
    };
    this.#worker = new Worker(workerEntry(), { workerData: start, transferList: [requests.port2, answers.port2, syncAnswers.port2] });
    // Neither keeps the process alive by itself: only a commit in flight does (#ref).
    this.#worker.unref();
    this.#answers.on("message", (answer: AsyncAnswer) => this.#answered(answer));
    this.#answers.unref();
    this.#worker.on("error", (error) => this.#gone_(new Error(`the journal's writer thread failed: ${error.message}`)));
    this.#worker.on("exit", () => this.#gone_(new Error("the journal's writer thread ended")));
    try {
      const opened = this.#call({ op: "open" }) as { fresh: boolean; settings: SqliteJournalSettings };
      this.fresh = opened.fresh;
      this.#settings = opened.settings;
    } catch (error) {
      void this.#worker.terminate();
      throw error;
    }
  }

  load(): ReadonlyMap<string, DurableSnapshot> {
    const { snapshots, lostHistory } = this.#call({ op: "load" }) as { snapshots: [string, DurableSnapshot][]; lostHistory: string | null };
    this.lostHistory = lostHistory;
    return new Map(snapshots);
  }

  /** One atomic commit, durable when it returns (blocks the caller: not for the daemon while serving). */
  commit(entries: readonly JournalEntry[]): void {
    if (this.#failure !== null) throw this.#failure;
    this.#call({ op: "commit", entries });
  }

  commitAsync(entries: readonly JournalEntry[]): Promise<void> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    if (this.#closed) return Promise.reject(new Error("journal: commit() on a closed journal"));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { sentAtMs: performance.now(), records: entries.length, resolve, reject });
      this.#ref();
      this.#requests.postMessage({ op: "commitAsync", id, entries } satisfies Request);
      this.#watchStall();
    });
  }

  /** Makes everything durable and closes the journal in its thread; waits for it. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      if (!this.#gone) this.#call({ op: "close" });
    } finally {
      this.#stopWatching();
      this.#fail(new Error("journal: the journal was closed before this commit was made durable"));
      void this.#worker.terminate();
    }
  }

  /** Why the journal cannot commit (a commit failed, or the disk has not answered for stallReportMs), or null. Never blocks. */
  problem(): string | null {
    if (this.#failure !== null && !this.#closed) return `a commit failed: ${this.#failure.message}`;
    const oldest = this.#oldest();
    const waitedMs = oldest === null ? 0 : performance.now() - oldest.sentAtMs;
    if (waitedMs < this.#stallReportMs) return null;
    return `a commit to ${this.path} has not come back from the disk for ${(waitedMs / 1000).toFixed(1)} s: the disk has stalled; commands are still answered, grants wait, and the daemon stops if it has not come back within journal.commitStallMs`;
  }

  /** Commits sent to the thread and not yet answered. */
  get unsynced(): number {
    return this.#pending.size;
  }

  settings(): SqliteJournalSettings {
    return this.#settings;
  }

  /** The gateway group the journal served in (SqliteJournal.group). */
  group(): string | null {
    return this.#call({ op: "group" }) as string | null;
  }

  setGroup(name: string | null): void {
    this.#call({ op: "setGroup", name });
  }

  /** A synchronous request: posted in order with the others, then waits for the thread's answer. */
  #call(request: Request): unknown {
    if (this.#closed && request.op !== "close") throw new Error(`journal: ${request.op}() on a closed journal`);
    if (this.#gone) throw this.#failure ?? new Error("the journal's writer thread ended");
    Atomics.store(this.#signal, 0, 0);
    this.#requests.postMessage(request);
    Atomics.wait(this.#signal, 0, 0);
    const got = receiveMessageOnPort(this.#syncAnswers);
    if (got === undefined) throw new Error(`journal: the writer thread woke the caller of ${request.op}() without an answer`);
    const answer = got.message as SyncAnswer;
    if (!answer.ok) throw fromWire(answer.error);
    return answer.value;
  }

  #answered(answer: AsyncAnswer): void {
    const pending = this.#pending.get(answer.id);
    if (pending === undefined) return;
    this.#pending.delete(answer.id);
    if (answer.ok) pending.resolve();
    else {
      this.#failure ??= fromWire(answer.error);
      pending.reject(fromWire(answer.error));
    }
    this.#ref();
    this.#watchStall();
  }

  /** The oldest commit still waiting (the map keeps the order they were sent). */
  #oldest(): Pending | null {
    for (const pending of this.#pending.values()) return pending;
    return null;
  }

  /** Keeps the process alive while a commit is in flight, not otherwise. */
  #ref(): void {
    if (this.#pending.size > 0) this.#answers.ref();
    else this.#answers.unref();
  }

  /** A timer for the oldest commit's stallReportMs; the end of a reported stall is logged. */
  #watchStall(): void {
    this.#stopWatching();
    const oldest = this.#oldest();
    if (this.#stalled && (oldest === null || performance.now() - oldest.sentAtMs < this.#stallReportMs)) {
      this.#stalled = false;
      this.#log?.info({ journal: this.path }, "the journal's disk answers again: commits complete");
    }
    if (oldest === null || this.#stalled) return;
    const dueMs = oldest.sentAtMs + this.#stallReportMs - performance.now();
    this.#stallTimer = setTimeout(
      () => {
        this.#stallTimer = null;
        const problem = this.problem();
        if (problem === null) return this.#watchStall();
        this.#stalled = true;
        this.#log?.warn({ journal: this.path, waitingCommits: this.#pending.size, stallReportMs: this.#stallReportMs }, problem);
      },
      Math.max(0, dueMs),
    );
    this.#stallTimer.unref();
  }

  #stopWatching(): void {
    if (this.#stallTimer !== null) clearTimeout(this.#stallTimer);
    this.#stallTimer = null;
  }

  #gone_(error: Error): void {
    this.#gone = true;
    this.#fail(error);
  }

  /** Every commit waiting is rejected, and every later one refused. */
  #fail(error: Error): void {
    this.#failure ??= error;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    this.#ref();
    for (const p of pending) p.reject(this.#failure);
  }
}

/** The thread's error as the class it was there: JournalError keeps its code, a caller's RangeError stays one. */
function fromWire(error: WireError): Error {
  if (error.name === "JournalError" && error.code !== undefined) {
    const prefix = `${error.code}: `;
    return new JournalError(
      error.code as JournalError["code"],
      error.message.startsWith(prefix) ? error.message.slice(prefix.length) : error.message,
    );
  }
  if (error.name === "RangeError") return new RangeError(error.message);
  return Object.assign(new Error(error.message), error.code === undefined ? {} : { code: error.code });
}
