/**
 * `fencegate journal recover`: after the journal lost committed history (its -wal deleted,
 * an older backup restored over it, the database file lost), raise every actuator's token
 * floor above anything ever granted, from the mark's ceilings, so the daemon can start
 * without granting a token twice. The floor is recorded as a fence observed at that token,
 * so the journal's own fold carries it; the newest grant's holder becomes unknown, so an
 * actuator with expiry policy `safe` gets its safe write at the next start.
 */
import fs from "node:fs";
import type { JournalEntry } from "../../shell/ports.ts";
import { readMark } from "./mark.ts";
import { openSqliteJournal } from "./sqlite.ts";

export interface RecoverOptions {
  readonly path: string;
  readonly recentLimit: number;
  /** The configured actuators (also those the journal or the mark do not know yet). */
  readonly actuators: readonly string[];
  /** A floor of the operator's own for every actuator, e.g. when there is no mark to read one from. */
  readonly floor?: number;
}

export interface RecoverResult {
  /** What was missing (the sentence the daemon refused with), or null if nothing was. */
  readonly lost: string | null;
  /** A -wal without its database, moved aside to this path. */
  readonly walMovedTo: string | null;
  /** Per actuator whose floor was raised: the highest token on record before, and the floor now. */
  readonly raised: readonly { readonly actuator: string; readonly before: number; readonly floor: number }[];
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
