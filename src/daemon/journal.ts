/**
 * The journal at the daemon's start: opened (its exclusive lock held until close), loaded,
 * and checked against the configuration's group before anything else is touched.
 */
import type { Logger } from "pino";
import { JournalThread, stallReportMs } from "../adapters/journal/worker-client.ts";
import type { GatewayConfig } from "../config/schema.ts";
import type { DurableSnapshot } from "../core/actuator.ts";

/**
 * A journal that served in a gateway group and is started without `group:` (taken out of
 * the group, or the section lost in an edit) would serve beside the group's active gateway:
 * two grants of one token. Refused until `fencegate journal leave-group` says it is meant.
 */
export class LeftGroupError extends Error {
  override readonly name = "LeftGroupError";
  constructor(
    readonly journalPath: string,
    readonly group: string,
  ) {
    super(
      `The journal ${journalPath} served in gateway group "${group}", and this configuration has no group section: alone, this gateway would serve its actuators beside the group's active gateway, and both would grant the same tokens. Put the group section back; or, if this gateway leaves the group for good and no other member serves these actuators any more, run fencegate journal leave-group once.`,
    );
  }
}

/**
 * Opens and loads the journal; throws its JournalError (the caller reports it and exits) or a
 * LeftGroupError, with the journal closed again. The journal's directory is never made here:
 * one that is gone is an unmounted disk, and a missing journal starts fresh only when the
 * configuration says so (docs/deploy.md §7). It runs in a writer thread of its own, so that no
 * disk access of it blocks the event loop (worker-client.ts).
 */
export function openJournal(
  config: GatewayConfig,
  log: Logger,
): { journal: JournalThread; snapshots: ReadonlyMap<string, DurableSnapshot> } {
  const journal = new JournalThread({
    path: config.journal.path,
    recentLimit: config.commands.recentLimit,
    syncStallMs: config.journal.commitStallMs,
    createIfMissing: config.journal.createIfMissing,
    stallReportMs: stallReportMs(config.journal.commitStallMs),
    log: log.child({ component: "journal" }),
  });
  let snapshots: ReadonlyMap<string, DurableSnapshot>;
  try {
    snapshots = journal.load();
    if (journal.fresh) {
      log.info({ journal: config.journal.path }, "new journal created: tokens start above the fences the fenced devices report");
    }
    keepGroupMembership(journal, config);
  } catch (error) {
    journal.close();
    throw error;
  }
  for (const [actuator, s] of snapshots) {
    log.info({ actuator, highestGranted: s.highestGranted, fence: s.fence }, "journal loaded");
  }
  return { journal, snapshots };
}

function keepGroupMembership(journal: JournalThread, config: GatewayConfig): void {
  const was = journal.group();
  if (config.group !== undefined) {
    if (was !== config.group.name) journal.setGroup(config.group.name);
  } else if (was !== null) {
    throw new LeftGroupError(config.journal.path, was);
  }
}
