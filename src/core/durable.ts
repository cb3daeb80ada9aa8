/**
 * How journal records fold into the durable part of an actuator's state. Every journal
 * implementation (SQLite, in-memory, simulated) must agree with this function; the
 * journal contract tests check that they do.
 */
import type { DurableSnapshot } from "./actuator.ts";
import type { CommandRecord, Fence, JournalRecord, Outcome } from "./types.ts";

/** What a restart makes of an intent whose outcome was never recorded. */
export const OUTCOME_LOST_IN_RESTART: Outcome = {
  kind: "failed",
  code: "OUTCOME_UNKNOWN",
  message: "The gateway restarted while this command was at the device; re-read state.",
};

function maxFence(a: Fence, b: Fence): Fence {
  if (a.token !== b.token) return a.token > b.token ? a : b;
  return (a.seq ?? -1) >= (b.seq ?? -1) ? a : b;
}

/**
 * Who holds the highest token once `token` is on record: `holder` when it is above every
 * earlier one (null: a token learned from a device, or a floor), else unchanged.
 */
function grantHolder(snapshot: DurableSnapshot, token: number, holder: string | null): string | null {
  return token > snapshot.highestGranted ? holder : snapshot.lastGrantHolder;
}

export function applyRecord(snapshot: DurableSnapshot, record: JournalRecord, recentLimit: number): DurableSnapshot {
  switch (record.type) {
    case "granted":
      return {
        ...snapshot,
        highestGranted: Math.max(snapshot.highestGranted, record.token),
        lastGrantHolder: grantHolder(snapshot, record.token, record.holder),
        fence: maxFence(snapshot.fence, { token: record.token, seq: null }),
      };
    case "fenceObserved":
      return {
        ...snapshot,
        highestGranted: Math.max(snapshot.highestGranted, record.token),
        lastGrantHolder: grantHolder(snapshot, record.token, null),
        fence: maxFence(snapshot.fence, { token: record.token, seq: record.seq }),
      };
    case "intent": {
      const entry: CommandRecord = { holder: record.holder, token: record.token, seq: record.seq, set: record.set, outcome: null };
      const recent = [...snapshot.recent, entry];
      return {
        highestGranted: Math.max(snapshot.highestGranted, record.token),
        lastGrantHolder: grantHolder(snapshot, record.token, null),
        fence: maxFence(snapshot.fence, { token: record.token, seq: record.seq }),
        recent: recent.length > recentLimit ? recent.slice(recent.length - recentLimit) : recent,
      };
    }
    case "outcome":
      return {
        ...snapshot,
        recent: snapshot.recent.map((r) =>
          r.token === record.token && r.seq === record.seq && r.outcome === null ? { ...r, outcome: record.outcome } : r,
        ),
      };
  }
}

/** The snapshot a restart works from: every pending intent is now of unknown outcome. */
export function afterRestart(snapshot: DurableSnapshot): DurableSnapshot {
  if (snapshot.recent.every((r) => r.outcome !== null)) return snapshot;
  return { ...snapshot, recent: snapshot.recent.map((r) => (r.outcome === null ? { ...r, outcome: OUTCOME_LOST_IN_RESTART } : r)) };
}
