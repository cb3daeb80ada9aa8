/**
 * The durable journal on SQLite (better-sqlite3), in WAL mode, one transaction per commit
 * (group commit).
 *
 * Durability: the connection runs `synchronous=NORMAL`, so a transaction's frames go to the
 * -wal file without an fsync, and this journal then calls `fdatasync` on the -wal file
 * itself before a commit counts: `commit()` synchronously, `commitAsync()` on libuv's thread
 * pool, off the event loop (an SD card's fsync takes milliseconds). Every frame of the
 * commit was written before that fdatasync started, so when it returns the commit is as
 * durable as under `synchronous=FULL`, which does the same fdatasync inline.
 *
 * Checkpoints (copying the -wal into the database file, so the -wal can be reused) are the
 * journal's too, every `checkpointEveryCommits` commits, because SQLite's own run inside a
 * commit with two fsyncs on the event loop (milliseconds here, tens of them on an SD card).
 * The journal keeps SQLite's order: only when every commit in the -wal is durable are its
 * pages copied into the database file (PASSIVE, without SQLite's fsyncs), then the
 * database file is fdatasynced on the pool, and no commit is written (none could reuse the
 * -wal) until that returns; commits made meanwhile wait and are written in order after it.
 *
 * Per actuator it keeps the highest granted token and the fence (one row in `actuators`)
 * and the recent commands in arrival order (`commands`, pruned to `recentLimit` in the same
 * transaction). The semantics are the fold of `applyRecord`: the new head of an actuator is
 * computed with `applyRecord` itself from the stored one, so tokens only ever go up.
 *
 * Single writer: two gateways on one journal would each believe their own fence, so the
 * journal holds an exclusive flock on the database file itself (its inode, whatever names
 * it has: see {@link lockJournal}) for its whole life, taken before it looks at anything
 * else, and a second opener is refused; a journal path that is a symbolic link is refused. The database itself runs SQLite's normal WAL locking, so readers (`fencegate log`,
 * the status page's audit trail: audit.ts) read a consistent snapshot without blocking a
 * commit or being blocked by one; a read-only connection never checkpoints, so it cannot
 * write behind the journal's own checkpoints or remove the -wal.
 *
 * Schema 3 added `commands.at_ms`, the wall-clock time a command was recorded (for people
 * reading the audit trail; nothing decides on it). Older journals are migrated in place
 * when opened; rows written before have no time.
 *
 * Lost history. A commit lives only in the -wal until a checkpoint copies it into the
 * database file, so a -wal that disappears (deleted after a crash, or an older backup of
 * the database restored over a newer one) silently takes the newest commits with it, and
 * the journal would grant their tokens again: a fenced device refuses them by its own
 * fence, a plain one cannot. The mark (journal.db-mark, mark.ts), a file of its own
 * written atomically (temporary file, fsync, rename, directory fsync), makes such a loss
 * visible:
 *   - `open`: true from a run's first durable commit (when the -wal exists) until a clean
 *     close has copied every commit into the database file (TRUNCATE checkpoint, database
 *     fdatasync). No -wal while the mark says open: commits are gone.
 *   - `generation`: bumped at every open, and written to the database (`meta`) in that
 *     open's first commit. A database below the mark's generation is older than the
 *     history: a restored backup, or a -wal lost before a checkpoint took its generation.
 *   - per actuator a `ceiling`, at or above every token ever granted: a commit that takes
 *     a head past it rewrites the mark first (ceiling = head + TOKEN_RESERVE), inside the
 *     transaction, so the ceiling is durable before a grant that could exceed it counts.
 *     It is the floor `fencegate journal recover` sets after a loss.
 * The loss of any one file is detected or harmless: the -wal (the open flag, the
 * generation), the database file (the mark, or the -wal, says a journal existed), the mark
 * (the database and -wal are whole: a new mark is written from them). Its cost: one mark
 * write per start, per clean stop, and per TOKEN_RESERVE grants of one actuator.
 */
import Database from "better-sqlite3";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import type { DurableSnapshot } from "../../core/actuator.ts";
import { EMPTY_SNAPSHOT } from "../../core/actuator.ts";
import { afterRestart, applyRecord, OUTCOME_LOST_IN_RESTART } from "../../core/durable.ts";
import type { CommandRecord, Fence } from "../../core/types.ts";
import type { Journal, JournalEntry, JournalWriter } from "../../shell/ports.ts";
import { JournalError } from "../../shell/ports.ts";
import { TOKEN_RESERVE, highestCeiling, markPath, readMark, writeMark, type JournalMark } from "./mark.ts";
import { nativeModuleError } from "./native.ts";
import { assertRecentLimit, assertStorable, isOutcome, isPointValues } from "./records.ts";

export const SCHEMA_VERSION = 3;
/** Schema 2: the journal's generation (see the mark, below). */
const META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT;";
/** `PRAGMA application_id`: "FNCG", marks the file as a fencegate journal. */
export const APPLICATION_ID = 0x464e4347;

const SCHEMA = `
CREATE TABLE actuators (
  id              TEXT PRIMARY KEY,
  highest_granted INTEGER NOT NULL,
  fence_token     INTEGER NOT NULL,
  fence_seq       INTEGER,
  granted_to      TEXT
) STRICT;
-- id is the arrival order: applyRecord appends intents in the order they are recorded,
-- which is not (token, seq) order when records arrive out of order.
CREATE TABLE commands (
  id           INTEGER PRIMARY KEY,
  actuator     TEXT NOT NULL,
  token        INTEGER NOT NULL,
  seq          INTEGER NOT NULL,
  holder       TEXT NOT NULL,
  set_json     TEXT NOT NULL,
  outcome_json TEXT,
  at_ms        INTEGER
) STRICT;
CREATE INDEX commands_by_command ON commands (actuator, token, seq);
CREATE INDEX commands_by_arrival ON commands (actuator, id);
${META}
PRAGMA application_id = ${APPLICATION_ID};
PRAGMA user_version = ${SCHEMA_VERSION};
`;

/**
 * What to do about a journal that cannot be used: never "restore from backup" alone (an
 * older journal grants again every token granted since), always with the current mark
 * kept and the recovery that raises every token above its floor (docs/deploy.md §7).
 */
function startFresh(file: string): string {
  return `Keep ${markPath(file)} where it is (its floor is above every token ever granted), restore the journal from a backup or move it (and any -wal file beside it) aside, then run \`fencegate journal recover\` with this gateway's --config, which sets every token above that floor (with no -mark file, add --floor above the highest token the retained states on the broker show), and start.`;
}

export interface SqliteJournalOptions {
  /** The database file, or ":memory:" (not durable; for tests). */
  readonly path: string;
  readonly recentLimit: number;
  /** How long to wait for a lock held by another connection before refusing. */
  readonly busyTimeoutMs?: number;
  /** Commits between the journal's checkpoints (default 128, a few hundred -wal pages). */
  readonly checkpointEveryCommits?: number;
  /** An fdatasync running longer than this makes {@link SqliteJournal.problem} report a stalled disk. */
  readonly syncStallMs?: number;
  /** The asynchronous fdatasync; tests replace it to hold a sync back or fail it. */
  readonly fdatasync?: (fd: number, callback: (err: NodeJS.ErrnoException | null) => void) => void;
  /**
   * Load even when committed history is missing (for `fencegate journal recover`, which
   * then sets token floors from the mark): `lostHistory` says what is missing.
   */
  readonly acceptLostHistory?: boolean;
  /**
   * Create the journal when there is no file (the default, for tools and tests). The daemon
   * passes `journal.createIfMissing`: off, a missing journal is refused (JOURNAL_MISSING).
   */
  readonly createIfMissing?: boolean;
  /** The wall clock stamped on each command record (`at_ms`), for people; default Date.now. */
  readonly wallNowMs?: () => number;
}

/** What `openSqliteJournal` found on disk before SQLite touched anything. */
interface Found {
  readonly fresh: boolean;
  readonly mark: JournalMark | null;
  /** A -wal with at least its header was beside the database. */
  readonly walExisted: boolean;
  /** The database file was missing although the mark says a journal was kept here. */
  readonly databaseLost: boolean;
}

export interface SqliteJournalSettings {
  readonly path: string;
  readonly journalMode: string;
  readonly synchronous: number;
  /** Commits are made durable by this journal's own fdatasync of the -wal file. */
  readonly walFdatasync: boolean;
  readonly lockingMode: string;
  /** The file whose flock keeps a second gateway off this journal: the database's real path (null for ":memory:"). */
  readonly writerLock: string | null;
  readonly busyTimeoutMs: number;
  readonly schemaVersion: number;
}

interface Head {
  readonly highestGranted: number;
  readonly lastGrantHolder: string | null;
  readonly fence: Fence;
}

interface ActuatorRow {
  id: unknown;
  highest_granted: unknown;
  fence_token: unknown;
  fence_seq: unknown;
  granted_to: unknown;
}

interface CommandRow {
  id: unknown;
  actuator: unknown;
  token: unknown;
  seq: unknown;
  holder: unknown;
  set_json: unknown;
  outcome_json: unknown;
}

/** A commit written to the -wal file, waiting for an fdatasync that started after it. */
interface Unsynced {
  readonly index: number;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

/** A commit made while a checkpoint's sync runs: written once it has returned. */
interface Held {
  readonly entries: readonly JournalEntry[];
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

export class SqliteJournal implements Journal, JournalWriter {
  readonly path: string;
  readonly recentLimit: number;
  /** True when this open created the journal (there was no file). */
  readonly fresh: boolean;
  readonly #db: Database.Database;
  readonly #commitTx: (entries: readonly JournalEntry[]) => void;
  readonly #stmt: ReturnType<typeof prepare>;
  readonly #fdatasync: NonNullable<SqliteJournalOptions["fdatasync"]>;
  readonly #wallNowMs: () => number;
  /** The writer lock on the database file, held until close (null for ":memory:"). */
  readonly #lock: WriterLock | null;
  /** Until load() has passed: keeps SQLite from checkpointing on a failed start's close (see keepFilesAsTheyAre). */
  #keeper: Database.Database | null;
  #loaded = false;
  /** The -wal and the database file, opened on their first sync. */
  #walFd: number | null = null;
  #dbFd: number | null = null;
  /** fdatasyncs running on the pool: the descriptors stay open until they return. */
  #poolSyncs = 0;
  /** Commits written so far, and how many of them an fdatasync has made durable. */
  #written = 0;
  #durable = 0;
  readonly #unsynced: Unsynced[] = [];
  #syncing = false;
  /** performance.now() when the fdatasync on the pool started. */
  #syncStartedMs = 0;
  readonly #checkpointEveryCommits: number;
  #commitsSinceCheckpoint = 0;
  /** The checkpoint whose database-file sync runs (a count, so a late callback knows it is stale), or 0. */
  #checkpoint = 0;
  #checkpoints = 0;
  #checkpointStartedMs = 0;
  readonly #held: Held[] = [];
  readonly #syncStallMs: number;
  /** The first failure of an asynchronous commit or sync: every later commit is refused with it. */
  #failure: Error | null = null;
  readonly #found: Found;
  /** The mark as last written (null for ":memory:"). */
  #mark: JournalMark | null = null;
  readonly #acceptLostHistory: boolean;
  /** What committed history is missing, found by load() (with acceptLostHistory), or null. */
  lostHistory: string | null = null;

  constructor(
    db: Database.Database,
    options: SqliteJournalOptions,
    found: Found,
    lock: WriterLock | null = null,
    keeper: Database.Database | null = null,
  ) {
    this.#db = db;
    this.#lock = lock;
    this.#keeper = keeper;
    this.#wallNowMs = options.wallNowMs ?? Date.now;
    this.path = options.path;
    this.recentLimit = options.recentLimit;
    this.fresh = found.fresh;
    this.#found = found;
    this.#acceptLostHistory = options.acceptLostHistory ?? false;
    this.#fdatasync = options.fdatasync ?? fs.fdatasync;
    this.#syncStallMs = options.syncStallMs ?? 10_000;
    this.#checkpointEveryCommits = options.checkpointEveryCommits ?? 128;
    this.#stmt = prepare(db);
    this.#commitTx = db.transaction((entries: readonly JournalEntry[]) => this.#write(entries)).immediate;
  }

  /**
   * Checks the file (`quick_check`) and every row, then durably records every intent that
   * has no outcome as OUTCOME_UNKNOWN, and returns the snapshots.
   */
  load(): ReadonlyMap<string, DurableSnapshot> {
    if (!this.#db.open) throw new Error("journal: load() on a closed journal");
    const result = guard(this.path, () => {
      const loaded = this.#db.transaction(() => this.#loadTx()).immediate();
      this.#syncNow(); // the OUTCOME_UNKNOWN records made by loading are durable before anything decides on them
      if (this.path !== ":memory:") this.#openMark(loaded);
      return loaded;
    });
    this.#keeper?.close();
    this.#keeper = null;
    this.#loaded = true;
    return result;
  }

  /**
   * The gateway group this journal last served in (a `meta` key `group:<name>`), or null. A
   * journal that was in a group does not start alone: it would serve beside the group's
   * active gateway (docs/gateway-group.md, "Leaving a group").
   */
  group(): string | null {
    const row = this.#db.prepare<[], { key: string }>("SELECT key FROM meta WHERE key LIKE 'group:%' LIMIT 1").get();
    return row === undefined ? null : row.key.slice("group:".length);
  }

  /** Records (durably, before anything is served) the group this journal serves in, or that it left (null). */
  setGroup(name: string | null): void {
    this.#db
      .transaction(() => {
        this.#db.prepare("DELETE FROM meta WHERE key LIKE 'group:%'").run();
        if (name !== null) this.#db.prepare("INSERT INTO meta (key, value) VALUES (?, 1)").run(`group:${name}`);
      })
      .immediate();
    this.#written++;
    this.#syncNow();
  }

  /**
   * Whether committed history is missing, from what was on disk before this open and the
   * database's generation: a sentence saying what happened, or null.
   */
  #lostHistory(generation: number): string | null {
    const { mark, walExisted, databaseLost } = this.#found;
    if (mark === null) return null;
    if (databaseLost) return databaseLostSentence(this.path, mark);
    const granted = `tokens up to ${highestCeiling(mark)} may have been granted`;
    if (mark.open && !walExisted) {
      return `${this.path}-wal is missing, but ${markPath(this.path)} says the journal was open when the gateway last stopped: the commits only the -wal held are lost (${granted}), and starting on what is left would grant tokens again.`;
    }
    if (generation < mark.generation) {
      return `${this.path} is older than ${markPath(this.path)} says (generation ${generation}, not ${mark.generation}): it was restored from an older backup, or its -wal was lost, and the newer commits are missing (${granted}).`;
    }
    return null;
  }

  /** The new generation is durable in the database: now the mark says so, open, with a ceiling for every head. */
  #openMark(heads: ReadonlyMap<string, DurableSnapshot>): void {
    const previous = this.#found.mark;
    const ceilings: Record<string, number> = { ...previous?.ceilings };
    for (const [actuator, head] of heads) {
      const ceiling = ceilings[actuator];
      if (ceiling === undefined || ceiling < head.highestGranted) ceilings[actuator] = ceilingAbove(head.highestGranted);
    }
    this.#mark = { generation: this.#generation, open: true, ceilings };
    writeMark(this.path, this.#mark);
  }

  #generation = 0;

  /** One atomic commit, durable (fdatasync done) when it returns. */
  commit(entries: readonly JournalEntry[]): void {
    this.#assertCommittable(entries);
    if (entries.length === 0) return;
    this.#finishCheckpointNow();
    try {
      this.#commitTx(entries);
    } catch (error) {
      this.#refuseLater(error);
      throw error;
    }
    this.#written++;
    this.#syncNow();
    // Here the caller waits anyway: SQLite's own checkpoint, with its fsyncs.
    if (++this.#commitsSinceCheckpoint >= this.#checkpointEveryCommits && this.path !== ":memory:") {
      this.#commitsSinceCheckpoint = 0;
      this.#db.pragma("wal_checkpoint(PASSIVE)");
      this.#checkpoints++;
    }
  }

  /**
   * One atomic commit, written now; the promise resolves once an fdatasync that started
   * after it has returned. Commits resolve in the order they were made. The first failure
   * rejects that commit and every later one; a failed sync also rejects every commit still
   * waiting for one (after a failed fsync nothing unsynced can be trusted), while a failed
   * write leaves the commits written before it to their sync.
   */
  commitAsync(entries: readonly JournalEntry[]): Promise<void> {
    if (this.#checkpoint !== 0 && this.#failure === null)
      return new Promise((resolve, reject) => this.#held.push({ entries, resolve, reject }));
    return this.#writeAsync(entries);
  }

  #writeAsync(entries: readonly JournalEntry[]): Promise<void> {
    try {
      this.#assertCommittable(entries);
      if (entries.length > 0) this.#commitTx(entries);
    } catch (error) {
      this.#refuseLater(error);
      return Promise.reject(error);
    }
    const index = ++this.#written;
    this.#commitsSinceCheckpoint++;
    return new Promise<void>((resolve, reject) => {
      this.#unsynced.push({ index, resolve, reject });
      this.#startSync();
    });
  }

  /** Why the journal cannot commit (a commit or its sync failed, or a sync hangs), or null. Never blocks. */
  problem(): string | null {
    if (this.#failure !== null) return `a commit failed: ${this.#failure.message}`;
    const syncingForMs = this.#syncing ? performance.now() - this.#syncStartedMs : 0;
    if (syncingForMs > this.#syncStallMs) {
      return `an fdatasync of ${this.path}-wal has not returned for ${(syncingForMs / 1000).toFixed(0)} s: the disk has stalled, and no commit can complete until it returns`;
    }
    const checkpointForMs = this.#checkpoint !== 0 ? performance.now() - this.#checkpointStartedMs : 0;
    if (checkpointForMs > this.#syncStallMs) {
      return `an fdatasync of ${this.path} (a checkpoint) has not returned for ${(checkpointForMs / 1000).toFixed(0)} s: the disk has stalled, and no commit can complete until it returns`;
    }
    return null;
  }

  /** Commits written and not yet known durable, and those waiting for a checkpoint's sync. */
  get unsynced(): number {
    return this.#unsynced.length + this.#held.length;
  }

  /** Checkpoints made so far (for tests and figures). */
  get checkpoints(): number {
    return this.#checkpoints;
  }

  /**
   * Makes everything written durable, settles the waiting commits, and closes. A sync
   * still running on the thread pool keeps the -wal descriptor until it returns.
   */
  close(): void {
    if (!this.#db.open) return;
    let problem: unknown = null;
    try {
      this.#finishCheckpointNow();
      if (this.#failure === null && this.#durable < this.#written) this.#syncNow();
      if (this.#failure === null) this.#checkpointAll();
    } catch (error) {
      problem = error;
    }
    this.#db.close();
    this.#keeper?.close(); // after the journal's own connection: no checkpoint, the files as they were
    this.#keeper = null;
    try {
      this.#closeMark();
    } catch (error) {
      problem ??= error;
    }
    this.#lock?.close(); // last: no second gateway while this one writes or marks
    this.#closeFilesWhenIdle();
    this.#fail(new Error("journal: the journal was closed before this commit was made durable"));
    if (problem !== null) throw problem;
  }

  /** Every commit copied into the database file, and that file synced: the -wal holds nothing more. */
  #checkpointAll(): void {
    if (this.#mark === null || !this.#loaded) return;
    this.#db.pragma("wal_checkpoint(TRUNCATE)");
    fs.fdatasyncSync(this.#dbFile());
  }

  /**
   * After SQLite's close: if the -wal is gone or empty, everything is in the database file
   * (SQLite deletes the -wal only after a complete checkpoint, which syncs the database
   * file), and the mark says closed. Only after a load that passed its checks: a journal
   * refused for lost history stays refused.
   */
  #closeMark(): void {
    const mark = this.#mark;
    if (mark === null || !this.#loaded || walHasHeader(this.path)) return;
    this.#mark = { ...mark, open: false };
    writeMark(this.path, this.#mark);
  }

  #assertCommittable(entries: readonly JournalEntry[]): void {
    if (!this.#db.open) throw new Error("journal: commit() on a closed journal");
    if (!this.#loaded) throw new Error("journal: commit() before load(); load() checks the journal and must come first");
    if (this.#failure !== null) throw this.#failure;
    assertStorable(entries);
  }

  /** fdatasync of the -wal file, here and now; everything written so far is durable after it. */
  #syncNow(): void {
    const upTo = this.#written;
    const fd = this.#wal();
    if (fd !== null) fs.fdatasyncSync(fd);
    this.#synced(upTo);
  }

  /** One fdatasync at a time on the pool; commits written meanwhile wait for the next one. */
  #startSync(): void {
    if (this.#syncing || this.#unsynced.length === 0) return;
    const upTo = this.#written;
    let fd: number | null;
    try {
      fd = this.#wal();
    } catch (error) {
      return this.#fail(error);
    }
    if (fd === null) return this.#synced(upTo);
    this.#syncing = true;
    this.#syncStartedMs = performance.now();
    this.#poolSyncs++;
    this.#fdatasync(fd, (err) => {
      this.#poolSyncs--;
      this.#syncing = false;
      if (!this.#db.open) return this.#closeFilesWhenIdle(); // close() synced and settled everything
      if (err)
        return this.#fail(
          new Error(
            `${this.path}-wal could not be synced to disk (${err.message}); nothing after the last durable commit can be trusted. Check the disk, then restart.`,
          ),
        );
      this.#synced(upTo);
      this.#maybeCheckpoint();
      this.#startSync();
    });
  }

  /**
   * Copies the -wal into the database file once enough commits went by and every one of
   * them is durable, then syncs the database file on the pool; commits wait until it
   * returns (see the module comment).
   */
  #maybeCheckpoint(): void {
    if (this.#checkpoint !== 0 || this.#commitsSinceCheckpoint < this.#checkpointEveryCommits || this.#durable < this.#written) return;
    if (this.path === ":memory:") return;
    this.#commitsSinceCheckpoint = 0;
    let fd: number;
    try {
      this.#db.pragma("synchronous = OFF");
      try {
        this.#db.pragma("wal_checkpoint(PASSIVE)");
      } finally {
        this.#db.pragma("synchronous = NORMAL");
      }
      fd = this.#dbFile();
    } catch (error) {
      return this.#fail(error);
    }
    const checkpoint = ++this.#checkpoints;
    this.#checkpoint = checkpoint;
    this.#checkpointStartedMs = performance.now();
    this.#poolSyncs++;
    this.#fdatasync(fd, (err) => {
      this.#poolSyncs--;
      if (!this.#db.open) return this.#closeFilesWhenIdle();
      if (this.#checkpoint !== checkpoint) return; // finished already, synchronously
      if (err) {
        this.#checkpoint = 0;
        return this.#fail(
          new Error(
            `${this.path} could not be synced to disk after a checkpoint (${err.message}); the journal cannot go on safely. Check the disk, then restart.`,
          ),
        );
      }
      this.#checkpointDone();
    });
  }

  /** The checkpoint's sync returned: write the commits that waited for it, in order. */
  #checkpointDone(): void {
    this.#checkpoint = 0;
    for (const held of this.#held.splice(0)) this.#writeAsync(held.entries).then(held.resolve, held.reject);
  }

  /** For a synchronous commit or close: the checkpoint's sync here and now, then the held commits. */
  #finishCheckpointNow(): void {
    if (this.#checkpoint === 0) return;
    fs.fdatasyncSync(this.#dbFile());
    this.#checkpointDone();
  }

  #synced(upTo: number): void {
    this.#durable = Math.max(this.#durable, upTo);
    while (this.#unsynced.length > 0 && this.#unsynced[0]!.index <= this.#durable) this.#unsynced.shift()!.resolve();
  }

  #refuseLater(error: unknown): void {
    this.#failure ??= error instanceof Error ? error : new Error(String(error));
  }

  #fail(error: unknown): void {
    this.#refuseLater(error);
    for (const waiter of this.#unsynced.splice(0)) waiter.reject(this.#failure);
    for (const held of this.#held.splice(0)) held.reject(this.#failure);
  }

  /**
   * The -wal file's descriptor, opened on first use (the directory is synced then too, as
   * SQLite does for a new -wal under FULL), and reopened should SQLite ever have replaced
   * the file (then the old one has no links left). Null for ":memory:".
   */
  #wal(): number | null {
    if (this.path === ":memory:") return null;
    if (this.#walFd !== null && fs.fstatSync(this.#walFd).nlink > 0) return this.#walFd;
    if (this.#walFd !== null && this.#poolSyncs === 0) fs.closeSync(this.#walFd); // else left to the process's end: a sync still uses it
    this.#walFd = fs.openSync(`${this.path}-wal`, "r+");
    fsyncPath(path.dirname(this.path));
    return this.#walFd;
  }

  #dbFile(): number {
    this.#dbFd ??= fs.openSync(this.path, "r+");
    return this.#dbFd;
  }

  /** Once closed and no sync on the pool uses them any more. */
  #closeFilesWhenIdle(): void {
    if (this.#db.open || this.#poolSyncs > 0) return;
    for (const fd of [this.#walFd, this.#dbFd]) if (fd !== null) fs.closeSync(fd);
    this.#walFd = null;
    this.#dbFd = null;
  }

  /** What the connection runs with, for the start-up log and the tests. */
  settings(): SqliteJournalSettings {
    const db = this.#db;
    return {
      path: this.path,
      journalMode: String(db.pragma("journal_mode", { simple: true })),
      synchronous: Number(db.pragma("synchronous", { simple: true })),
      walFdatasync: this.path !== ":memory:",
      lockingMode: String(db.pragma("locking_mode", { simple: true })),
      writerLock: this.#lock?.path ?? null,
      busyTimeoutMs: Number(db.pragma("busy_timeout", { simple: true })),
      schemaVersion: Number(db.pragma("user_version", { simple: true })),
    };
  }

  #write(entries: readonly JournalEntry[]): void {
    const s = this.#stmt;
    const heads = new Map<string, Head>();
    const stored = new Map<string, Head>();
    const appended = new Set<string>();
    for (const { actuator, record } of entries) {
      let head = heads.get(actuator);
      if (head === undefined) {
        head = this.#readHead(actuator);
        stored.set(actuator, head);
      }
      // The head follows applyRecord exactly; with no recent list it costs nothing.
      const next = applyRecord({ ...head, recent: [] }, record, 0);
      heads.set(actuator, { highestGranted: next.highestGranted, lastGrantHolder: next.lastGrantHolder, fence: next.fence });
      if (record.type === "intent") {
        s.insertCommand.run(actuator, record.token, record.seq, record.holder, JSON.stringify(record.set), this.#wallNowMs());
        appended.add(actuator);
      } else if (record.type === "outcome") {
        s.attachOutcome.run(JSON.stringify(record.outcome), actuator, record.token, record.seq);
      }
    }
    for (const [actuator, head] of heads) {
      // An outcome leaves the head as it was: no write (one page less in the -wal per command).
      const before = stored.get(actuator)!;
      if (before !== EMPTY_SNAPSHOT && sameHead(before, head)) continue;
      s.upsertHead.run(actuator, head.highestGranted, head.fence.token, head.fence.seq, head.lastGrantHolder);
    }
    this.#raiseCeilings(heads);
    // Pruning once per commit keeps the same records as pruning after each intent: what an
    // earlier intent pushed out is older than the newest recentLimit at the end too.
    for (const actuator of appended) s.prune.run(actuator, actuator, this.recentLimit);
  }

  /** A head past its ceiling: the mark is rewritten before this commit can count (see the module comment). */
  #raiseCeilings(heads: ReadonlyMap<string, Head>): void {
    const mark = this.#mark;
    if (mark === null) return;
    let ceilings: Record<string, number> | null = null;
    for (const [actuator, head] of heads) {
      if (head.highestGranted <= (mark.ceilings[actuator] ?? 0)) continue;
      ceilings ??= { ...mark.ceilings };
      ceilings[actuator] = ceilingAbove(head.highestGranted);
    }
    if (ceilings === null) return;
    const next = { ...mark, ceilings };
    writeMark(this.path, next);
    this.#mark = next;
  }

  #readHead(actuator: string): Head {
    const row = this.#stmt.head.get(actuator) as
      { highest_granted: number; fence_token: number; fence_seq: number | null; granted_to: string | null } | undefined;
    if (row === undefined) return EMPTY_SNAPSHOT;
    return { highestGranted: row.highest_granted, lastGrantHolder: row.granted_to, fence: { token: row.fence_token, seq: row.fence_seq } };
  }

  #loadTx(): Map<string, DurableSnapshot> {
    const problems = (this.#db.pragma("quick_check(5)") as { quick_check: string }[]).map((r) => r.quick_check);
    if (problems.length !== 1 || problems[0] !== "ok") {
      throw new JournalError(
        "JOURNAL_UNREADABLE",
        `${this.path} is damaged (quick_check: ${problems.join("; ")}). ${startFresh(this.path)}`,
      );
    }
    const actuators = this.#stmt.allActuators.all() as ActuatorRow[];
    const commands = this.#stmt.allCommands.all() as CommandRow[];
    const checker: RowChecker = new RowChecker(this.path);

    const snapshots = new Map<string, { head: Head; recent: { id: number; record: CommandRecord }[] }>();
    for (const row of actuators) {
      const id = checker.text(row.id, "actuator id");
      const where = `actuator ${JSON.stringify(id)}`;
      const highestGranted = checker.count(row.highest_granted, `${where}: highest_granted`);
      const fence: Fence = {
        token: checker.count(row.fence_token, `${where}: fence_token`),
        seq: row.fence_seq === null ? null : checker.count(row.fence_seq, `${where}: fence_seq`),
      };
      if (fence.token > highestGranted)
        checker.fail(`${where}: the fence token ${fence.token} is above the highest granted token ${highestGranted}`);
      const lastGrantHolder = row.granted_to === null ? null : checker.text(row.granted_to, `${where}: granted_to`);
      snapshots.set(id, { head: { highestGranted, lastGrantHolder, fence }, recent: [] });
    }
    for (const row of commands) {
      const rowId = checker.count(row.id, "command id");
      const actuator = checker.text(row.actuator, `command ${rowId}: actuator`);
      const where = `command ${rowId} of actuator ${JSON.stringify(actuator)}`;
      const entry = snapshots.get(actuator);
      if (entry === undefined) checker.fail(`${where}: the actuator has no row in actuators`);
      const token = checker.count(row.token, `${where}: token`);
      const seq = checker.count(row.seq, `${where}: seq`);
      const holder = checker.text(row.holder, `${where}: holder`);
      const set = checker.json(row.set_json, isPointValues, `${where}: set_json`);
      const outcome = row.outcome_json === null ? null : checker.json(row.outcome_json, isOutcome, `${where}: outcome_json`);
      const { highestGranted, fence } = entry.head;
      if (token > highestGranted) checker.fail(`${where}: token ${token} is above the highest granted token ${highestGranted}`);
      if (token > fence.token || (token === fence.token && seq > (fence.seq ?? -1))) {
        checker.fail(
          `${where}: (${token}, ${seq}) is above the fence (${fence.token}, ${fence.seq}); the fence must cover every recorded command`,
        );
      }
      entry.recent.push({ id: rowId, record: { holder, token, seq, set, outcome } });
    }

    // Last of the checks, so that a damaged journal is reported as damaged.
    const generation = checker.count(this.#stmt.generation.get()?.value ?? 0n, "meta: generation");
    const lost = this.#lostHistory(generation);
    if (lost !== null && !this.#acceptLostHistory) throw new JournalError("JOURNAL_LOST_HISTORY", `${lost} ${recoverAdvice(this.path)}`);
    this.lostHistory = lost;
    this.#generation = Math.max(generation, this.#found.mark?.generation ?? 0) + 1;
    this.#stmt.setGeneration.run(this.#generation);

    const result = new Map<string, DurableSnapshot>();
    for (const [id, { head, recent }] of snapshots) {
      // Opened with a smaller recentLimit than it was written with: keep the newest.
      const excess = recent.length - this.recentLimit;
      if (excess > 0) this.#stmt.prune.run(id, id, this.recentLimit);
      const kept = excess > 0 ? recent.slice(excess) : recent;
      result.set(id, afterRestart({ ...head, recent: kept.map((r) => r.record) }));
    }
    // The same conversion afterRestart made above, made durable.
    this.#stmt.markLost.run(JSON.stringify(OUTCOME_LOST_IN_RESTART));
    return result;
  }
}

function prepare(db: Database.Database) {
  const statements = {
    head: db.prepare("SELECT highest_granted, fence_token, fence_seq, granted_to FROM actuators WHERE id = ?"),
    upsertHead: db.prepare(
      `INSERT INTO actuators (id, highest_granted, fence_token, fence_seq, granted_to) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET highest_granted = excluded.highest_granted,
         fence_token = excluded.fence_token, fence_seq = excluded.fence_seq, granted_to = excluded.granted_to`,
    ),
    insertCommand: db.prepare(
      "INSERT INTO commands (actuator, token, seq, holder, set_json, outcome_json, at_ms) VALUES (?, ?, ?, ?, ?, NULL, ?)",
    ),
    // Like applyRecord: the first outcome wins, for every matching intent still without one.
    attachOutcome: db.prepare("UPDATE commands SET outcome_json = ? WHERE actuator = ? AND token = ? AND seq = ? AND outcome_json IS NULL"),
    prune: db.prepare(
      "DELETE FROM commands WHERE actuator = ? AND id <= (SELECT id FROM commands WHERE actuator = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
    ),
    markLost: db.prepare("UPDATE commands SET outcome_json = ? WHERE outcome_json IS NULL"),
    generation: db.prepare<[], { value: bigint }>("SELECT value FROM meta WHERE key = 'generation'").safeIntegers(true),
    setGeneration: db.prepare(
      "INSERT INTO meta (key, value) VALUES ('generation', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    ),
    allActuators: db
      .prepare("SELECT id, highest_granted, fence_token, fence_seq, granted_to FROM actuators ORDER BY id")
      .safeIntegers(true),
    allCommands: db.prepare("SELECT id, actuator, token, seq, holder, set_json, outcome_json FROM commands ORDER BY id").safeIntegers(true),
  };
  return statements;
}

/** Checks values read back from disk; the first bad one throws JOURNAL_INCONSISTENT. */
class RowChecker {
  constructor(readonly file: string) {}

  fail(problem: string): never {
    throw new JournalError("JOURNAL_INCONSISTENT", `${this.file}: ${problem}. ${startFresh(this.file)}`);
  }
  /** Read with safeIntegers: an INTEGER arrives as a bigint, exact even beyond 2^53. */
  count(x: unknown, what: string): number {
    if (typeof x === "bigint" && x >= 0n && x <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(x);
    return this.fail(`${what} is ${describe(x)}, not an integer from 0 to 2^53-1`);
  }
  text(x: unknown, what: string): string {
    return typeof x === "string" ? x : this.fail(`${what} is ${describe(x)}, not text`);
  }
  json<T>(x: unknown, valid: (v: unknown) => v is T, what: string): T {
    const text = this.text(x, what);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return this.fail(`${what} is not valid JSON: ${truncate(text)}`);
    }
    return valid(value) ? value : this.fail(`${what} has the wrong shape: ${truncate(text)}`);
  }
}

function describe(x: unknown): string {
  if (typeof x === "bigint") return x.toString();
  if (typeof x === "string") return `the text ${truncate(JSON.stringify(x))}`;
  if (x instanceof Uint8Array) return `a blob of ${x.length} bytes`;
  return String(x);
}

function sameHead(a: Head, b: Head): boolean {
  return (
    a.highestGranted === b.highestGranted &&
    a.lastGrantHolder === b.lastGrantHolder &&
    a.fence.token === b.fence.token &&
    a.fence.seq === b.fence.seq
  );
}

function truncate(s: string): string {
  return s.length > 80 ? `${s.slice(0, 80)}…` : s;
}

/**
 * Opens (or, when no file exists, creates) the journal. Throws {@link JournalError} when the
 * file cannot be used; `load()` then checks its contents.
 */
export function openSqliteJournal(options: SqliteJournalOptions): SqliteJournal {
  assertRecentLimit(options.recentLimit);
  const file = options.path;
  if (file === ":memory:") return guard(file, () => openLocked(options, null, { fresh: true, databaseLost: false }));
  return guard(file, () => {
    refuseLink(file);
    const created = exists(file) ? { fresh: false, databaseLost: false } : createJournal(options);
    const lock = lockJournal(file, options.busyTimeoutMs ?? 5000);
    try {
      return openLocked(options, lock, created);
    } catch (error) {
      lock.close();
      throw error;
    }
  });
}

/**
 * No database file: refused when something beside it says a journal was kept here, or when
 * creating was not asked for; else created. Nothing is made in the refusals (the
 * operator's next look finds what was there, and a directory that is gone may be an
 * unmounted disk's mount point). Without a lock: there is no file to lock yet, and a
 * gateway running on this journal would have one.
 */
function createJournal(options: SqliteJournalOptions): { fresh: boolean; databaseLost: boolean } {
  const file = options.path;
  if (exists(`${file}-wal`)) {
    throw new JournalError(
      "JOURNAL_INCONSISTENT",
      `${file} is missing but ${file}-wal is there: the journal was partly deleted or moved. Restore both files together, or move the -wal file aside to start fresh; a fresh journal starts from the devices' own fences.`,
    );
  }
  const mark = readMark(file);
  if (mark !== null && !options.acceptLostHistory)
    throw new JournalError("JOURNAL_LOST_HISTORY", `${databaseLostSentence(file, mark)} ${recoverAdvice(file)}`);
  if (options.createIfMissing === false) throw missingJournal(file);
  return { fresh: createFile(file), databaseLost: mark !== null };
}

/**
 * A journal path that is a symbolic link: the -wal and -mark beside the link are not those
 * beside the journal, so the link is refused and the real path asked for.
 */
function refuseLink(file: string): void {
  let target: string;
  try {
    if (!fs.lstatSync(file).isSymbolicLink()) return;
    target = path.resolve(path.dirname(file), fs.readlinkSync(file));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  throw new JournalError(
    "JOURNAL_UNREADABLE",
    `${file} is a symbolic link to ${target}: point journal.path at the file itself (${target}). The journal's -wal and -mark files live beside the database, not beside a link to it.`,
  );
}

/** Everything after the writer lock is held: what is on disk is this gateway's to judge. */
function openLocked(
  options: SqliteJournalOptions,
  lock: WriterLock | null,
  created: { fresh: boolean; databaseLost: boolean },
): SqliteJournal {
  const file = options.path;
  const inMemory = lock === null;
  // Read under the lock: a gateway that held it until a moment ago wrote its last mark.
  const mark = inMemory ? null : readMark(file);
  const walExisted = !inMemory && walHasHeader(file);
  if (!inMemory) {
    // SQLite would quietly fall back to read-only and fail later with a vague I/O error.
    // The directory must be writable too: the -wal file is created beside the journal.
    fs.accessSync(file, fs.constants.R_OK | fs.constants.W_OK);
    fs.accessSync(path.dirname(file), fs.constants.W_OK | fs.constants.X_OK);
  }
  const db = new Database(file, { fileMustExist: !inMemory, timeout: options.busyTimeoutMs ?? 5000 });
  let keeper: Database.Database | null = null;
  try {
    keeper = inMemory ? null : keepFilesAsTheyAre(file, options.busyTimeoutMs ?? 5000);
    configure(db, file, inMemory);
    return new SqliteJournal(db, options, { fresh: created.fresh, mark, walExisted, databaseLost: created.databaseLost }, lock, keeper);
  } catch (error) {
    db.close();
    keeper?.close();
    throw error;
  }
}

/**
 * A read-only connection held open until the journal's load has passed its checks and
 * marked the journal open. The last connection to close checkpoints the -wal into the
 * database and deletes it, and a start that failed (a full disk, a damaged row) would
 * then leave the mark saying open with no -wal: a false JOURNAL_LOST_HISTORY at the next
 * start. With this one open the journal's own connection is never the last before then,
 * and a read-only connection never checkpoints: a failed start leaves the files as they
 * were. Its read takes the shared lock that says so.
 */
function keepFilesAsTheyAre(file: string, timeoutMs: number): Database.Database {
  const keeper = new Database(file, { readonly: true, fileMustExist: true, timeout: timeoutMs });
  try {
    keeper.pragma("schema_version");
    return keeper;
  } catch (error) {
    keeper.close();
    throw error;
  }
}

/** The single-writer lock: flock(2) on an open descriptor of the database file itself. */
class WriterLock {
  constructor(
    /** The file locked, its real path (links in the directory resolved). */
    readonly path: string,
    readonly fd: number,
  ) {}

  /**
   * Only after the journal's SQLite connection has closed: closing a descriptor of the file
   * drops every POSIX record lock this process holds on it, SQLite's included.
   */
  close(): void {
    fs.closeSync(this.fd);
  }
}

/** flock(1)'s exit code when the lock is held elsewhere (its --conflict-exit-code). */
const LOCK_HELD_EXIT = 75;

/**
 * Locks the database file by its inode, so that every name for it (a hard link, a symbolic
 * link, a path with a linked directory) meets the same lock, and there is no lock file to
 * delete. flock(2), taken on the open file description, is held until the descriptor
 * closes or the process ends, so a crash leaves no stale lock; it does not interact with
 * SQLite's own fcntl locks, so readers (`fencegate log`) are not blocked. Node has no
 * flock, so util-linux's flock(1) takes it on the descriptor, inherited: the lock belongs
 * to the description, which stays open here when the child exits. A second gateway waits
 * `timeoutMs` for it, then is refused: "in use by another process".
 */
function lockJournal(file: string, timeoutMs: number): WriterLock {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  try {
    if (!flock(file, fd, timeoutMs)) throw inUse(file, `flock: held by another process for all of ${timeoutMs} ms`);
    // Replaced between the open and the lock (a journal created beside it at that moment):
    // the lock is on a file that no longer has this name.
    const held = fs.fstatSync(fd);
    const named = fs.statSync(file);
    if (held.ino !== named.ino || held.dev !== named.dev) throw inUse(file, "the file was replaced while it was being opened");
    return new WriterLock(path.join(fs.realpathSync(path.dirname(file)), path.basename(file)), fd);
  } catch (error) {
    fs.closeSync(fd);
    throw error;
  }
}

/** Takes the exclusive flock on `fd`, waiting up to `timeoutMs`: false when another process holds it. */
function flock(file: string, fd: number, timeoutMs: number): boolean {
  const wait = timeoutMs > 0 ? ["--timeout", String(timeoutMs / 1000)] : ["--nonblock"];
  const run = spawnSync("flock", ["--exclusive", ...wait, "--conflict-exit-code", String(LOCK_HELD_EXIT), "3"], {
    stdio: ["ignore", "ignore", "pipe", fd],
    encoding: "utf8",
  });
  if (run.error !== undefined) {
    throw new JournalError(
      "JOURNAL_UNREADABLE",
      `${file}: the writer lock could not be taken: flock(1) did not run (${run.error.message}). Install util-linux, which provides it.`,
    );
  }
  if (run.status === LOCK_HELD_EXIT) return false;
  if (run.status !== 0)
    throw new JournalError(
      "JOURNAL_UNREADABLE",
      `${file}: the writer lock could not be taken (flock: ${run.stderr.trim() || `exit ${run.status}`}).`,
    );
  return true;
}

/**
 * Whether another process holds the journal's writer lock (a daemon running on it), for
 * `fencegate doctor`. Call it only with no SQLite connection of this process on `file`.
 */
export function writerLockHeld(file: string): boolean {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY);
  } catch {
    return false;
  }
  try {
    return !flock(file, fd, 0);
  } finally {
    fs.closeSync(fd);
  }
}

function inUse(file: string, detail: string): JournalError {
  return new JournalError("JOURNAL_UNREADABLE", `${file} ${explain(file, Object.assign(new Error(detail), { code: "SQLITE_BUSY" }))}`);
}

function configure(db: Database.Database, file: string, inMemory: boolean): void {
  const version = Number(db.pragma("user_version", { simple: true }));
  const appId = Number(db.pragma("application_id", { simple: true }));
  if (inMemory && version === 0) db.exec(SCHEMA);
  else if (appId === APPLICATION_ID && version < SCHEMA_VERSION && version >= 1) migrate(db, version);
  else if (version > SCHEMA_VERSION) {
    throw new JournalError(
      "JOURNAL_NEWER_VERSION",
      `${file} has schema version ${version}; this fencegate reads up to ${SCHEMA_VERSION}. Run the fencegate that wrote it (or a newer one); do not start an older one on it.`,
    );
  } else if (appId !== APPLICATION_ID || version !== SCHEMA_VERSION) {
    throw new JournalError(
      "JOURNAL_UNREADABLE",
      `${file} is a SQLite file but not a fencegate journal (application_id ${appId}, user_version ${version}): empty, damaged or another program's. ${startFresh(file)}`,
    );
  }
  if (!inMemory) {
    const mode = String(db.pragma("journal_mode = WAL", { simple: true }));
    if (mode !== "wal") throw new JournalError("JOURNAL_UNREADABLE", `${file}: could not switch to WAL mode (got ${mode}).`);
  }
  // NORMAL: commits are not synced by SQLite but by the journal's own fdatasync of the -wal,
  // and checkpoints are the journal's own (see the module comment).
  db.pragma("synchronous = NORMAL");
  db.pragma("wal_autocheckpoint = 0");
}

/**
 * Brings a journal written by an older fencegate up to SCHEMA_VERSION, in one transaction.
 * 1 → 2: `granted_to`, who holds the highest token (unknown, NULL, for what 1 recorded),
 * and `meta` with the generation (0 until the first open writes one).
 * 2 → 3: `commands.at_ms`, the wall-clock time of each command (NULL for those before).
 */
function migrate(db: Database.Database, from: number): void {
  db.transaction(() => {
    if (from < 2) db.exec(`ALTER TABLE actuators ADD COLUMN granted_to TEXT; ${META}`);
    if (from < 3) db.exec("ALTER TABLE commands ADD COLUMN at_ms INTEGER");
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

/**
 * Creates the journal beside its final path and renames it into place, so a file at `path`
 * always has a schema: an existing empty or headless file is damage, never "fresh".
 */
function createFile(file: string): boolean {
  const temp = `${file}.creating.${process.pid}`;
  for (const f of [temp, `${temp}-wal`, `${temp}-shm`, `${temp}-journal`]) fs.rmSync(f, { force: true });
  const db = new Database(temp);
  try {
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    db.exec(SCHEMA);
  } finally {
    db.close(); // checkpoints the WAL into the file and removes it
  }
  fsyncPath(temp);
  // A link, not a rename: a journal another process created meanwhile is never replaced.
  let created = true;
  try {
    fs.linkSync(temp, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    created = false;
  } finally {
    fs.rmSync(temp, { force: true });
  }
  fsyncPath(path.dirname(file));
  return created;
}

function fsyncPath(p: string): void {
  const fd = fs.openSync(p, "r");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * No journal, and nothing beside it saying one was kept: a new gateway, or the disk that
 * holds it is not mounted. Starting fresh there would grant tokens again that paused
 * controllers may hold, so it takes an explicit step (docs/deploy.md §7).
 */
function missingJournal(file: string): JournalError {
  const dir = path.dirname(file);
  const what = exists(dir) ? `${file} does not exist` : `${file} does not exist: its directory ${dir} does not exist`;
  return new JournalError(
    "JOURNAL_MISSING",
    `${what}, and the daemon does not start a fresh journal by itself (it would grant tokens again that controllers may still hold). If the journal is on a disk or partition that is not mounted, mount it and start again; if this gateway is new (or you mean to start afresh, with the controllers of plain actuators stopped), run \`fencegate journal init\` with this gateway's --config, then start.`,
  );
}

function databaseLostSentence(file: string, mark: JournalMark): string {
  return `${file} is missing, but ${markPath(file)} says a journal was kept here (tokens up to ${highestCeiling(mark)} may have been granted): starting empty would grant those tokens again.`;
}

/** What to do about lost history: the second sentence of every such refusal. */
function recoverAdvice(file: string): string {
  return `Put the missing file back if you have it (a database and its -wal from the same moment); otherwise stop the controllers of plain actuators and run \`fencegate journal recover\` with this gateway's --config, which sets every actuator's next token above anything ever granted (from ${markPath(file)}), then start again.`;
}

function ceilingAbove(token: number): number {
  return Math.min(token + TOKEN_RESERVE, Number.MAX_SAFE_INTEGER);
}

/** A -wal holding at least its 32-byte header: one that can hold commits. */
function walHasHeader(file: string): boolean {
  try {
    return fs.statSync(`${file}-wal`).size >= 32;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
}

function exists(p: string): boolean {
  try {
    fs.statSync(p);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
}

/** Runs `fn`, turning every failure to read or open the file into a JournalError (or a NativeModuleError: the install's fault, not the file's). */
function guard<T>(file: string, fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (error instanceof JournalError || error instanceof RangeError) throw error;
    throw nativeModuleError(error) ?? new JournalError("JOURNAL_UNREADABLE", `${file} ${explain(file, error)}`, { cause: error });
  }
}

function explain(file: string, error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  switch (code) {
    case "SQLITE_BUSY":
    case "SQLITE_LOCKED":
      return `is in use by another process (${message}). Is another fencegate running on this journal? Stop it first; two gateways must never share one.`;
    case "SQLITE_NOTADB":
      return `is not a SQLite database (${message}): garbage, truncated or overwritten. ${startFresh(file)}`;
    case "SQLITE_CORRUPT":
      return `is damaged (${message}). ${startFresh(file)}`;
    case "EACCES":
    case "EPERM":
    case "SQLITE_PERM":
    case "SQLITE_READONLY":
    case "SQLITE_CANTOPEN":
    case "SQLITE_AUTH":
      return `cannot be opened for reading and writing (${message}): check that it is a file and that the daemon's user may read and write it and its directory.`;
    case "EROFS":
      return `cannot be written (${message}): the filesystem is read-only: check the card and the mount (the kernel remounts a failing SD card read-only; \`dmesg\`, \`findmnt ${path.dirname(file)}\`). The journal itself may be intact: leave it as it is.`;
    case "ENOSPC":
    case "SQLITE_FULL":
      return `cannot be written (${message}): the disk is full: free space and start again. The journal itself is intact: leave it as it is.`;
    default:
      if (/directory does not exist/.test(message)) return `cannot be created: ${message}. Create the directory, or fix the journal path.`;
      return `cannot be read (${message}). ${startFresh(file)}`;
  }
}
