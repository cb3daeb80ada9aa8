/**
 * The audit trail: the commands an actuator accepted, as the journal recorded them (time,
 * holder, token, seq, set, outcome), read from the journal file through a read-only SQLite
 * connection. `fencegate log` and the status page read it here, and only here, so that a
 * change of what an audit record holds changes one module.
 *
 * Reading never disturbs the daemon: the journal's single-writer lock is a flock, which
 * SQLite's locks do not meet (sqlite.ts), the database runs SQLite's normal WAL locking, and a reader sees the
 * snapshot of the last commit when its query started without blocking the writer or being
 * blocked by it. A read-only connection never checkpoints, so it cannot write pages into
 * the database file behind the daemon's own checkpoints.
 *
 * What the file holds is what the daemon wrote, which may be a few milliseconds ahead of
 * its fdatasync, and commands' records reach it within the audit lag (journal.auditLagMs);
 * the daemon's page answers only once every record handed to the journal before the
 * request is durable (GroupCommitter.whenDurable).
 *
 * The trail holds the newest `commands.recentLimit` commands per actuator (the journal
 * prunes older ones). Refusals are not in it: they change nothing (B/A/events has them).
 */
import Database from "better-sqlite3";
import { existsSync } from "node:fs";
import type { Outcome, PointValues } from "../../core/types.ts";
import { FAILURE_CODES, isCount, isOutcome, isPointValues } from "./records.ts";
import { APPLICATION_ID, SCHEMA_VERSION } from "./sqlite.ts";

/** The largest page of entries one query returns. */
export const MAX_AUDIT_PAGE = 1000;

/** What `outcome` may filter on: a kind, or one failure code. */
export const OUTCOME_FILTERS = ["applied", "failed", "pending", ...FAILURE_CODES] as const;
export type OutcomeFilter = (typeof OUTCOME_FILTERS)[number];

export interface AuditQuery {
  readonly actuator: string;
  readonly holder?: string | undefined;
  readonly outcome?: OutcomeFilter | undefined;
  /** Only entries recorded at or after this wall-clock time (ms since the epoch). */
  readonly sinceMs?: number | undefined;
  /** Paging: only entries older than this entry id (the previous page's `nextBefore`). */
  readonly before?: number | undefined;
  /** 1..MAX_AUDIT_PAGE. */
  readonly limit: number;
}

/** `pending`: recorded as accepted, no outcome yet (in flight, or the daemon stopped before it). */
export type AuditOutcome = Outcome | { readonly kind: "pending" };

export interface AuditEntry {
  /** The record's place in the journal: newer entries have larger ids. */
  readonly id: number;
  /** When the gateway recorded it (wall clock, ms since the epoch); null for records from before schema 3. */
  readonly atMs: number | null;
  readonly holder: string;
  readonly token: number;
  readonly seq: number;
  readonly set: PointValues;
  readonly outcome: AuditOutcome;
}

export interface AuditPage {
  /** Newest first. */
  readonly entries: readonly AuditEntry[];
  /** Pass as `before` for the next (older) page; null when there is none. */
  readonly nextBefore: number | null;
}

export class AuditError extends Error {
  override readonly name = "AuditError";
  constructor(
    readonly code: "JOURNAL_MISSING" | "JOURNAL_UNREADABLE" | "JOURNAL_NEWER_VERSION",
    message: string,
  ) {
    super(message);
  }
}

interface Row {
  id: unknown;
  at_ms: unknown;
  holder: unknown;
  token: unknown;
  seq: unknown;
  set_json: unknown;
  outcome_json: unknown;
}

/** A read-only view of one journal file's audit trail. Cheap to keep open; close when done. */
export class AuditReader {
  readonly #db: Database.Database;
  readonly #hasTime: boolean;
  readonly #statements = new Map<string, Database.Statement>();

  private constructor(
    readonly path: string,
    db: Database.Database,
    hasTime: boolean,
  ) {
    this.#db = db;
    this.#hasTime = hasTime;
  }

  /** Opens `path` read-only. Throws {@link AuditError} with a sentence saying what to do. */
  static open(path: string, options: { readonly busyTimeoutMs?: number } = {}): AuditReader {
    let db: Database.Database;
    try {
      db = new Database(path, { readonly: true, fileMustExist: true, timeout: options.busyTimeoutMs ?? 2000 });
    } catch (error) {
      throw explain(path, error);
    }
    try {
      const appId = Number(db.pragma("application_id", { simple: true }));
      const version = Number(db.pragma("user_version", { simple: true }));
      if (appId !== APPLICATION_ID || version < 1) {
        throw new AuditError(
          "JOURNAL_UNREADABLE",
          `${path} is not a fencegate journal (application_id ${appId}, user_version ${version}); give the daemon's journal.path.`,
        );
      }
      if (version > SCHEMA_VERSION) {
        throw new AuditError(
          "JOURNAL_NEWER_VERSION",
          `${path} has schema version ${version}; this fencegate reads up to ${SCHEMA_VERSION}. Use the fencegate that wrote it.`,
        );
      }
      db.pragma("query_only = ON");
      // at_ms came with schema 3: older journals (not yet opened by this daemon) have no time.
      const hasTime = (db.pragma("table_info(commands)") as { name: string }[]).some((c) => c.name === "at_ms");
      return new AuditReader(path, db, hasTime);
    } catch (error) {
      db.close();
      throw error instanceof AuditError ? error : explain(path, error);
    }
  }

  /** The actuators with a record in this journal, sorted. */
  actuators(): string[] {
    return this.#guard(() =>
      (this.#db.prepare("SELECT id FROM actuators ORDER BY id").pluck().all() as unknown[]).filter(
        (x): x is string => typeof x === "string",
      ),
    );
  }

  /** One page of `query.actuator`'s trail, newest first, read in one consistent snapshot. */
  page(query: AuditQuery): AuditPage {
    if (!(Number.isSafeInteger(query.limit) && query.limit >= 1 && query.limit <= MAX_AUDIT_PAGE)) {
      throw new RangeError(`limit must be an integer from 1 to ${MAX_AUDIT_PAGE}, got ${query.limit}`);
    }
    const where = ["actuator = @actuator", "id < @before"];
    const params: Record<string, unknown> = {
      actuator: query.actuator,
      before: query.before ?? Number.MAX_SAFE_INTEGER,
      limit: query.limit + 1,
    };
    if (query.holder !== undefined) {
      where.push("holder = @holder");
      params["holder"] = query.holder;
    }
    if (query.sinceMs !== undefined) {
      // Records from before schema 3 have no time: a time filter leaves them out.
      where.push(this.#hasTime ? "at_ms >= @since" : "0");
      if (this.#hasTime) params["since"] = query.sinceMs;
    }
    if (query.outcome !== undefined) where.push(outcomeSql(query.outcome));
    const sql = `SELECT id, ${this.#hasTime ? "at_ms" : "NULL AS at_ms"}, holder, token, seq, set_json, outcome_json FROM commands WHERE ${where.join(" AND ")} ORDER BY id DESC LIMIT @limit`;
    if (query.outcome !== undefined && (FAILURE_CODES as readonly string[]).includes(query.outcome)) params["code"] = query.outcome;
    const rows = this.#guard(() => this.#statement(sql).all(params) as Row[]);
    const entries = rows.slice(0, query.limit).map((row) => this.#entry(row));
    return { entries, nextBefore: rows.length > query.limit ? entries[entries.length - 1]!.id : null };
  }

  close(): void {
    this.#db.close();
  }

  #statement(sql: string): Database.Statement {
    let statement = this.#statements.get(sql);
    if (statement === undefined) {
      statement = this.#db.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  #entry(row: Row): AuditEntry {
    const bad = (what: string): never => {
      throw new AuditError(
        "JOURNAL_UNREADABLE",
        `${this.path}: command ${String(row.id)} has ${what}; the journal is damaged (fencegate doctor says more).`,
      );
    };
    const id = isCount(row.id) ? row.id : bad("a bad id");
    const token = isCount(row.token) ? row.token : bad("a bad token");
    const seq = isCount(row.seq) ? row.seq : bad("a bad seq");
    const holder = typeof row.holder === "string" ? row.holder : bad("a bad holder");
    const atMs = row.at_ms === null ? null : Number.isSafeInteger(row.at_ms) ? (row.at_ms as number) : bad("a bad time");
    const set = parseJson(row.set_json, isPointValues) ?? bad("an unreadable set");
    const outcome: AuditOutcome =
      row.outcome_json === null ? { kind: "pending" } : (parseJson(row.outcome_json, isOutcome) ?? bad("an unreadable outcome"));
    return { id, atMs, holder, token, seq, set, outcome };
  }

  #guard<T>(fn: () => T): T {
    try {
      return fn();
    } catch (error) {
      throw error instanceof AuditError ? error : explain(this.path, error);
    }
  }
}

/** The WHERE clause of an outcome filter; a failure code is bound as @code. */
function outcomeSql(filter: OutcomeFilter): string {
  if (filter === "pending") return "outcome_json IS NULL";
  if (filter === "applied" || filter === "failed") return `json_extract(outcome_json, '$.kind') = '${filter}'`;
  return "json_extract(outcome_json, '$.code') = @code";
}

function parseJson<T>(text: unknown, valid: (x: unknown) => x is T): T | null {
  if (typeof text !== "string") return null;
  try {
    const value: unknown = JSON.parse(text);
    return valid(value) ? value : null;
  } catch {
    return null;
  }
}

function explain(path: string, error: unknown): AuditError {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  if (/does not exist/.test(message) || (code === "SQLITE_CANTOPEN" && !existsSync(path))) {
    return new AuditError(
      "JOURNAL_MISSING",
      `${path} cannot be opened (${message}): check journal.path (--config or --journal) and that this user may read it and its directory.`,
    );
  }
  if (typeof code === "string" && /^SQLITE_(CANTOPEN|READONLY|PERM|AUTH)/.test(code) && process.getuid?.() === 0) {
    return new AuditError(
      "JOURNAL_UNREADABLE",
      `${path} cannot be opened, even by root (${message}): check that it, its -wal and -shm files and its directory are intact (fencegate doctor says more).`,
    );
  }
  if (typeof code === "string" && /^SQLITE_(CANTOPEN|READONLY|PERM|AUTH)/.test(code)) {
    return new AuditError(
      "JOURNAL_UNREADABLE",
      `${path} cannot be read by this user (${message}): run as the daemon's user (sudo -u fencegate fencegate log ...), which may read the journal, its -wal and -shm files.`,
    );
  }
  if (code === "SQLITE_BUSY") {
    return new AuditError("JOURNAL_UNREADABLE", `${path} stayed busy (${message}); try again in a moment.`);
  }
  return new AuditError("JOURNAL_UNREADABLE", `${path} cannot be read (${message}).`);
}
