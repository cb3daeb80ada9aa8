/**
 * `fencegate journal recover`: after the journal lost committed history (its -wal deleted,
 * an older backup restored over it, the database file lost), raise every actuator's token
 * floor above anything ever granted, from the mark's ceilings, so the daemon can start
 * without granting a token twice. The floor is recorded as a fence observed at that token,
 * so the journal's own fold carries it; the newest grant's holder becomes unknown, so an
 * actuator with expiry policy `safe` gets its safe write at the next start.
 */
import fs from "node:fs";
import { dirname } from "node:path";
import { JournalError, type JournalEntry } from "../../shell/ports.ts";
import { TOKEN_RESERVE, highestCeiling, readMark } from "./mark.ts";
import { openSqliteJournal } from "./sqlite.ts";

export interface RecoverOptions {
  readonly path: string;
  readonly recentLimit: number;
  /** The configured actuators (also those the journal or the mark do not know yet). */
  readonly actuators: readonly string[];
  /** A floor of the operator's own for every actuator, e.g. when there is no mark to read one from. */
  readonly floor?: number;
  /** Set a floor far above what the journal and its mark know of (see {@link FloorTooHighError}). */
  readonly farFloorConfirmed?: boolean;
}

/**
 * A floor more than TOKEN_RESERVE above the highest token the journal and its mark know of:
 * likely a few digits too many, and a floor near 2^53−1 uses the actuator's tokens (and
 * its fenced device's fence) up for good. Asked for again with `--yes`; nothing changed.
 */
export class FloorTooHighError extends Error {
  override readonly name = "FloorTooHighError";
}

/** Grants left above `token` before the token space ends at 2^53−1. */
export function grantsLeft(token: number): number {
  return Number.MAX_SAFE_INTEGER - token;
}

export function plural(n: number, one: string): string {
  return `${n} ${one}${n === 1 ? "" : "s"}`;
}

export interface RecoverResult {
  /** What was missing (the sentence the daemon refused with), or null if nothing was. */
  readonly lost: string | null;
  /** A -wal without its database, moved aside to this path. */
  readonly walMovedTo: string | null;
  /** Per actuator whose floor was raised: the highest token on record before, and the floor now. */
  readonly raised: readonly { readonly actuator: string; readonly before: number; readonly floor: number }[];
}

/**
 * `fencegate journal init`: creates the journal at `path` (and its mark) if there is none;
 * false when one exists, which is left alone. The directory must exist: one that is gone
 * is a disk not mounted, and the journal does not belong on what is under it.
 */
export function initJournal(path: string): boolean {
  if (fs.existsSync(path)) return false;
  if (!fs.existsSync(dirname(path))) {
    throw new JournalError(
      "JOURNAL_MISSING",
      `${path} cannot be created: its directory ${dirname(path)} does not exist. Mount the disk that holds it, or create the directory for the daemon's user (install -d -o fencegate -g fencegate -m 0750 ${dirname(path)}), then run this again.`,
    );
  }
  const journal = openSqliteJournal({ path, recentLimit: 1 });
  try {
    journal.load();
  } finally {
    journal.close();
  }
  return true;
}

export function recoverJournal(options: RecoverOptions): RecoverResult {
  const { path } = options;
  const mark = readMark(path);
  let walMovedTo: string | null = null;
  if (!fs.existsSync(path) && fs.existsSync(`${path}-wal`)) {
    // A -wal is only ever read with the database it was written for: SQLite would apply it
    // to the new one.
    walMovedTo = `${path}-wal.orphan-${Date.now()}`;
    fs.renameSync(`${path}-wal`, walMovedTo);
  }
  const journal = openSqliteJournal({ path, recentLimit: options.recentLimit, acceptLostHistory: true });
  try {
    const heads = journal.load();
    const lost = journal.lostHistory;
    if (lost === null && options.floor === undefined) return { lost, walMovedTo, raised: [] };
    const known = Math.max(mark === null ? 0 : highestCeiling(mark), ...[...heads.values()].map((h) => h.highestGranted));
    if (options.floor !== undefined && options.floor - known > TOKEN_RESERVE && !options.farFloorConfirmed) {
      throw new FloorTooHighError(
        `--floor ${options.floor} is far above anything ${path} and its mark know of (the highest: ${known}), and leaves ${plural(grantsLeft(options.floor), "grant")} per actuator before its tokens are used up for good (they end at 2^53-1 = ${Number.MAX_SAFE_INTEGER}; a fenced device's fence follows). Nothing changed. Check the number; if the retained states on the broker do show tokens that high, run again with --yes.`,
      );
    }
    // Only a loss found against the mark (so there is one) takes its ceilings as floors.
    const ceilings = lost !== null ? (mark?.ceilings ?? {}) : {};
    const ids = new Set([...options.actuators, ...heads.keys(), ...Object.keys(ceilings)]);
    const raised: { actuator: string; before: number; floor: number }[] = [];
    const entries: JournalEntry[] = [];
    for (const actuator of [...ids].sort()) {
      const before = heads.get(actuator)?.highestGranted ?? 0;
      const floor = Math.max(ceilings[actuator] ?? 0, options.floor ?? 0);
      if (floor <= before) continue;
      raised.push({ actuator, before, floor });
      entries.push({ actuator, record: { type: "fenceObserved", token: floor, seq: null } });
    }
    journal.commit(entries);
    return { lost, walMovedTo, raised };
  } finally {
    journal.close();
  }
}
