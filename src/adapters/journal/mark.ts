/**
 * The journal's mark: a small file beside the SQLite journal (`journal.db-mark`) that lets
 * the daemon tell when committed history is missing, and sets a floor above every token
 * ever granted to recover from it. Why a file of its own, and why these fields, is in the
 * module comment of sqlite.ts.
 */
import fs from "node:fs";
import path from "node:path";
import { JournalError } from "../../shell/ports.ts";
import { isCount } from "./records.ts";

/** Tokens reserved per actuator above its highest granted: a grant past them rewrites the mark first. */
export const TOKEN_RESERVE = 1_000_000;

export interface JournalMark {
  /** Bumped at every open, and stored in the database too: a database behind it is older than the history. */
  readonly generation: number;
  /** Set while the journal is open: then its -wal file must exist, holding commits not yet in the database file. */
  readonly open: boolean;
  /** Per actuator, a token at or above every token ever granted for it. */
  readonly ceilings: Readonly<Record<string, number>>;
}

const FORMAT = 1;

export function markPath(journal: string): string {
  return `${journal}-mark`;
}

/** The mark beside `journal`, or null if there is none. Throws JournalError if it is damaged. */
export function readMark(journal: string): JournalMark | null {
  const file = markPath(journal);
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new JournalError(
      "JOURNAL_UNREADABLE",
      `${file} cannot be read (${(error as Error).message}): check that the daemon's user may read and write it.`,
      { cause: error },
    );
  }
  const mark = parse(text);
  if (mark === null)
    throw new JournalError(
      "JOURNAL_UNREADABLE",
      `${file} is damaged (${text.length > 60 ? `${text.slice(0, 60)}…` : JSON.stringify(text)}). ${damagedMarkAdvice(journal)}`,
    );
  return mark;
}

/**
 * The mark is the one file whose loss the others cover: with the database and its -wal
 * whole, a new mark is written from them. Restoring the journal instead would lose the
 * newest commits and grant their tokens again.
 */
function damagedMarkAdvice(journal: string): string {
  const file = markPath(journal);
  if (fs.existsSync(`${journal}-wal`)) {
    return `The -wal beside it is there, so ${journal} and its -wal hold every commit: remove ${file} and start; a new one is written from the journal. Putting an older backup of the journal back instead would grant tokens again.`;
  }
  return `If ${journal} last stopped cleanly (the daemon logged "fencegate daemon stopped"), remove ${file} and start: a new one is written from the journal. If it crashed and its -wal is gone, remove ${file} too, then run \`fencegate journal recover --floor N\` with this gateway's --config and N above the highest token the retained states on the broker show, so that no token is granted again.`;
}

function parse(text: string): JournalMark | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null) return null;
  const v = value as Record<string, unknown>;
  if (v["format"] !== FORMAT || !isCount(v["generation"]) || typeof v["open"] !== "boolean") return null;
  const ceilings = v["ceilings"];
  if (typeof ceilings !== "object" || ceilings === null || Array.isArray(ceilings)) return null;
  if (!Object.values(ceilings).every(isCount)) return null;
  return { generation: v["generation"], open: v["open"], ceilings: ceilings as Record<string, number> };
}

/**
 * Replaces the mark atomically and durably: written to a temporary file, synced, renamed
 * over the old one, and the directory synced, so a crash leaves the old mark or the new.
 */
export function writeMark(journal: string, mark: JournalMark): void {
  const file = markPath(journal);
  const temp = `${file}.tmp`;
  const fd = fs.openSync(temp, "w", 0o600);
  try {
    fs.writeSync(fd, `${JSON.stringify({ format: FORMAT, generation: mark.generation, open: mark.open, ceilings: mark.ceilings })}\n`);
    fs.fdatasyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temp, file);
  const dir = fs.openSync(path.dirname(file), "r");
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
}

/** The highest ceiling on record, for messages: "tokens up to N may have been granted". */
export function highestCeiling(mark: JournalMark): number {
  return Math.max(0, ...Object.values(mark.ceilings));
}
