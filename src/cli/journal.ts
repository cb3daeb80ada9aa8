/** `fencegate journal recover --config FILE`: token floors above anything ever granted, after lost history. */
import { parseArgs } from "node:util";
import { recoverJournal } from "../adapters/journal/recover.ts";
import { loadConfigFile } from "../config/load.ts";
import { ConfigError } from "../config/problems.ts";
import { JournalError } from "../shell/ports.ts";

export const EXIT = { OK: 0, USAGE: 64, JOURNAL: 74, CONFIG: 78 } as const;

const HELP = `usage: fencegate journal recover --config FILE [--floor N] [--json]

When the journal lost committed history (its -wal file deleted after a crash, an older
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
      --json          print {"lost", "raised": [{actuator, before, floor}]} for scripts
  -h, --help

examples:
  sudo systemctl stop fencegate
  sudo -u fencegate fencegate journal recover --config /etc/fencegate/gateway.yaml
  sudo systemctl start fencegate

exit codes: 0 recovered or nothing to recover, 64 usage, 74 the journal cannot be opened
            (in use by a running daemon, damaged), 78 configuration invalid`;

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  let values;
  try {
    ({ values } = parseArgs({
      args: rest,
      options: { config: { type: "string", short: "c" }, floor: { type: "string" }, json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
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
  if (sub !== "recover") {
    console.error(`fencegate journal: ${sub === undefined ? "a subcommand is required" : `unknown subcommand "${sub}"`}\n\n${HELP}`);
    return EXIT.USAGE;
  }
  if (!values.config) {
    console.error(`fencegate journal recover: --config is required\n\n${HELP}`);
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
  let result;
  try {
    result = recoverJournal({
      path: config.journal.path,
      recentLimit: config.commands.recentLimit,
      actuators: config.actuators.map((a) => a.id),
      ...(floor === undefined ? {} : { floor }),
    });
  } catch (err) {
    if (!(err instanceof JournalError)) throw err;
    console.error(err.message);
    return EXIT.JOURNAL;
  }
  if (values.json) {
    console.log(JSON.stringify(result));
    return EXIT.OK;
  }
  const lines: string[] = [];
  if (result.walMovedTo !== null) lines.push(`${config.journal.path}-wal had no database beside it: moved aside to ${result.walMovedTo}.`);
  lines.push(result.lost ?? `${config.journal.path}: no committed history is missing.`);
  for (const r of result.raised) lines.push(`  ${r.actuator}: the next token is above ${r.floor} (the journal had ${r.before})`);
  if (result.raised.length === 0) lines.push("No token floor changed.");
  else lines.push("The daemon can start now; every controller acquires again, above every token ever granted.");
  console.log(lines.join("\n"));
  return EXIT.OK;
}
