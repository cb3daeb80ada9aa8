/**
 * `fencegate journal init --config FILE`: creates the journal, the one explicit step that
 * starts one (the daemon refuses a missing journal). `fencegate journal recover --config
 * FILE`: token floors above anything ever granted, after lost history.
 * `fencegate journal leave-group --config FILE`: a journal that served in a gateway group may start alone.
 */
import { parseArgs } from "node:util";
import { FloorTooHighError, grantsLeft, initJournal, plural, recoverJournal } from "../adapters/journal/recover.ts";
import { openSqliteJournal } from "../adapters/journal/sqlite.ts";
import { loadConfigFile } from "../config/load.ts";
import { ConfigError } from "../config/problems.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { JournalError } from "../shell/ports.ts";
import { EXIT } from "../exit-codes.ts";

/** Grants left below which the recovery's summary says how many. */
const FEW_GRANTS = 1_000_000_000;

const HELP = `usage: fencegate journal init --config FILE
       fencegate journal recover --config FILE [--floor N [--yes]] [--json]
       fencegate journal leave-group --config FILE

init creates the journal at the configuration's journal.path, in a directory that must
exist (the daemon never creates one: a missing journal, as on a disk that is not mounted,
stops it with exit 74). Run it once when installing; on an existing journal it changes
nothing. Tokens of a new journal start above the fences the fenced devices report.

recover: when the journal lost committed history (its -wal file deleted after a crash, an older
backup restored over it, the database file gone), the daemon refuses to start (exit 74):
starting on what is left would grant tokens again that controllers may still hold. This
raises every actuator's next token above anything ever granted, from the ceilings that
journal.db-mark keeps, so the daemon can start. Actuators with expiry policy "safe" get
their safe write at that start. Run it with the daemon stopped; with nothing lost it
changes nothing (unless --floor).

options:
  -c, --config FILE   the daemon's YAML configuration (its journal.path)
      --floor N       also raise every actuator's next token above N (a floor of your own,
                      e.g. above the highest token the retained states on the broker show)
      --yes           set a --floor more than a million above every token the journal and
                      its mark know of (without it such a floor, likely a typo that would
                      use an actuator's tokens up, is refused, exit 64)
      --json          print {"lost", "raised": [{actuator, before, floor}]} for scripts
  -h, --help

leave-group: a journal that served in a gateway group refuses to start without a group
section (exit 78): alone, the gateway would serve beside the group's active gateway and
both would grant the same tokens. This says that it is meant: the gateway has left the
group for good, and no other member serves its actuators any more. Run it with the daemon
stopped, after removing the group section from its configuration.

examples:
  sudo -u fencegate fencegate journal init --config /etc/fencegate/gateway.yaml
  sudo systemctl stop fencegate
  sudo -u fencegate fencegate journal recover --config /etc/fencegate/gateway.yaml
  sudo systemctl start fencegate

exit codes: 0 created, recovered or nothing to do, 64 usage, 74 the journal cannot be
            opened or created (in use by a running daemon, damaged, its directory
            missing), 78 configuration invalid`;

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  let values;
  try {
    ({ values } = parseArgs({
      args: rest,
      options: {
        config: { type: "string", short: "c" },
        floor: { type: "string" },
        yes: { type: "boolean" },
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (err) {
    console.error(`fencegate journal: ${(err as Error).message}\n\n${HELP}`);
    return EXIT.USAGE;
  }
  if (values.help || sub === "--help" || sub === "-h") {
    console.log(HELP);
    return EXIT.OK;
  }
  if (sub !== "recover" && sub !== "init" && sub !== "leave-group") {
    console.error(`fencegate journal: ${sub === undefined ? "a subcommand is required" : `unknown subcommand "${sub}"`}\n\n${HELP}`);
    return EXIT.USAGE;
  }
  if (!values.config) {
    console.error(`fencegate journal ${sub}: --config is required\n\n${HELP}`);
    return EXIT.USAGE;
  }
  if (sub !== "recover" && (values.floor !== undefined || values.json || values.yes)) {
    console.error(`fencegate journal ${sub}: --floor, --yes and --json are options of recover\n\n${HELP}`);
    return EXIT.USAGE;
  }
  const floor = values.floor === undefined ? undefined : Number(values.floor);
  if (floor !== undefined && !(Number.isSafeInteger(floor) && floor >= 0)) {
    console.error(`fencegate journal recover: --floor must be a whole number from 0 to 9007199254740991, not "${values.floor}"\n\n${HELP}`);
    return EXIT.USAGE;
  }
  let config;
  try {
    config = loadConfigFile(values.config);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(err.message);
    return EXIT.CONFIG;
  }
  if (sub === "init") return init(config.journal.path);
  if (sub === "leave-group") return leaveGroup(config.journal.path, config.group?.name ?? null, config.commands.recentLimit);
  return recover(config, floor, { confirmed: values.yes ?? false, json: values.json ?? false });
}

/** `fencegate journal recover`: raises every token above the floor, and says what it did. */
function recover(
  config: GatewayConfig,
  floor: number | undefined,
  options: { readonly confirmed: boolean; readonly json: boolean },
): number {
  let result;
  try {
    result = recoverJournal({
      path: config.journal.path,
      recentLimit: config.commands.recentLimit,
      actuators: config.actuators.map((a) => a.id),
      ...(floor === undefined ? {} : { floor }),
      farFloorConfirmed: options.confirmed,
    });
  } catch (err) {
    if (err instanceof FloorTooHighError) {
      console.error(`fencegate journal recover: ${err.message}`);
      return EXIT.USAGE;
    }
    if (!(err instanceof JournalError)) throw err;
    console.error(err.message);
    return EXIT.JOURNAL;
  }
  if (options.json) {
    console.log(JSON.stringify(result));
    return EXIT.OK;
  }
  const lines: string[] = [];
  if (result.walMovedTo !== null) lines.push(`${config.journal.path}-wal had no database beside it: moved aside to ${result.walMovedTo}.`);
  lines.push(result.lost ?? `${config.journal.path}: no committed history is missing.`);
  for (const r of result.raised) {
    const left = grantsLeft(r.floor) < FEW_GRANTS ? `; ${plural(grantsLeft(r.floor), "grant")} left` : "";
    lines.push(`  ${r.actuator}: the next token is above ${r.floor} (the journal had ${r.before}${left})`);
  }
  if (result.raised.length === 0) lines.push("No token floor changed.");
  else lines.push("The daemon can start now; every controller acquires again, above every token ever granted.");
  console.log(lines.join("\n"));
  return EXIT.OK;
}

function init(file: string): number {
  let created;
  try {
    created = initJournal(file);
  } catch (err) {
    if (!(err instanceof JournalError)) throw err;
    console.error(err.message);
    return EXIT.JOURNAL;
  }
  console.log(
    created
      ? `${file}: a new journal; tokens start above the fences the fenced devices report. Start the daemon now.`
      : `${file} already exists: nothing changed.`,
  );
  return EXIT.OK;
}

function leaveGroup(path: string, configured: string | null, recentLimit: number): number {
  if (configured !== null) {
    console.error(
      `fencegate journal leave-group: the configuration still has a group section (group "${configured}"): remove it first; while it is there the gateway serves as a member of that group.`,
    );
    return EXIT.CONFIG;
  }
  let was: string | null;
  try {
    const journal = openSqliteJournal({ path, recentLimit });
    try {
      journal.load();
      was = journal.group();
      if (was !== null) journal.setGroup(null);
    } finally {
      journal.close();
    }
  } catch (err) {
    if (!(err instanceof JournalError)) throw err;
    console.error(err.message);
    return EXIT.JOURNAL;
  }
  if (was === null) {
    console.log(`${path} was not in a gateway group: nothing changed.`);
    return EXIT.OK;
  }
  console.log(
    [
      `${path} has left gateway group "${was}": the gateway now starts alone and serves its actuators by itself.`,
      `Make sure no member of "${was}" serves them any more (stop it, or remove these actuators from its configuration):`,
      "two gateways serving one actuator grant the same tokens. Fenced devices then refuse the writes of the one behind; plain devices take both.",
    ].join("\n"),
  );
  return EXIT.OK;
}
