/**
 * `fencegate log ACTUATOR`: the audit trail of one actuator, read from the journal file
 * (read-only: safe while the daemon runs, see src/adapters/journal/audit.ts).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ArgsError, parseCommandLine } from "./args.ts";
import {
  AuditError,
  AuditReader,
  MAX_AUDIT_PAGE,
  OUTCOME_FILTERS,
  type AuditEntry,
  type OutcomeFilter,
} from "../adapters/journal/audit.ts";
import { ACTUATOR_PATTERN, HOLDER_PATTERN } from "../../packages/protocol/src/index.ts";
import { ConfigError } from "../config/problems.ts";
import { loadConfigFile } from "../config/load.ts";
import { EXIT } from "../exit-codes.ts";

const DEFAULT_LIMIT = 50;

const HELP = `usage: fencegate log ACTUATOR (--config FILE | --journal FILE) [options]

The audit trail of one actuator: every command it accepted, newest first, with its holder,
token, seq, the values set and the outcome. TIME is when the journal recorded the command
(within journal.auditLagMs of the decision). Read from the journal file, read-only: safe
while the daemon runs (run it as the daemon's user). Refusals change nothing and are not
recorded; \`fencegate watch\` and the status page show them live.

options:
  -c, --config FILE    the daemon's configuration (its journal.path)   FENCEGATE_CONFIG
  -j, --journal FILE   the journal file itself
      --since WHEN     recorded at or after WHEN: a date and time (2026-12-01T08:00:00Z)
                       or an age (90s, 15m, 2h, 7d)
      --holder ID      only this holder's commands (@gateway: the gateway's safe writes)
      --outcome O      ${OUTCOME_FILTERS.join(", ")}
  -n, --limit N        at most N commands, 1 to ${MAX_AUDIT_PAGE} (default ${DEFAULT_LIMIT})
      --json           a JSON array, for scripts
  -h, --help

examples:
  fencegate log valve-1 -c /etc/fencegate/gateway.yaml --since 1h
  fencegate log valve-1 -j /var/lib/fencegate/journal.db --outcome OUTCOME_UNKNOWN --json

exit codes: 0 ok (also when nothing matches), 5 no such actuator in the journal, 64 usage,
            66 journal missing, 74 journal unreadable, 78 configuration invalid`;

const AGE = /^([0-9]{1,9})(s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--since`: an ISO date and time, or an age before `nowMs`; null when it is neither. */
function parseSince(text: string, nowMs: number): number | null {
  const age = AGE.exec(text);
  if (age) return nowMs - Number(age[1]) * UNIT_MS[age[2]!]!;
  if (text.length > 40 || !/^\d{4}-\d{2}-\d{2}/.test(text)) return null;
  const ms = Date.parse(text);
  return Number.isFinite(ms) ? ms : null;
}

class UsageError extends Error {}

interface LogArgs {
  readonly actuator: string;
  readonly journal: string;
  readonly holder?: string | undefined;
  readonly outcome?: OutcomeFilter | undefined;
  readonly sinceMs?: number | undefined;
  readonly limit: number;
  readonly json: boolean;
}

function parse(argv: string[]): LogArgs | "help" {
  let parsed;
  try {
    parsed = parseCommandLine(argv, {
      config: { type: "string", short: "c" },
      journal: { type: "string", short: "j" },
      since: { type: "string" },
      holder: { type: "string" },
      outcome: { type: "string" },
      limit: { type: "string", short: "n" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    });
  } catch (err) {
    if (!(err instanceof ArgsError)) throw err;
    throw new UsageError(err.message);
  }
  const { values, positionals } = parsed;
  if (values.help) return "help";
  if (positionals.length !== 1)
    throw new UsageError(positionals.length === 0 ? "name the actuator" : `one actuator at a time, got ${positionals.length}`);
  const actuator = positionals[0]!;
  if (!ACTUATOR_PATTERN.test(actuator))
    throw new UsageError(`"${actuator.slice(0, 80)}" is not an actuator id: 1 to 64 lower-case letters, digits, "-" and "_"`);
  if (values.holder !== undefined && !HOLDER_PATTERN.test(values.holder)) {
    throw new UsageError('--holder must be 1 to 128 letters, digits, ".", "_", ":" or "-"');
  }
  if (values.outcome !== undefined && !(OUTCOME_FILTERS as readonly string[]).includes(values.outcome)) {
    throw new UsageError(`--outcome must be one of ${OUTCOME_FILTERS.join(", ")}`);
  }
  let sinceMs: number | undefined;
  if (values.since !== undefined) {
    const since = parseSince(values.since, Date.now());
    if (since === null)
      throw new UsageError(
        `--since must be a date and time (2026-12-01T08:00:00Z) or an age (90s, 15m, 2h, 7d), got "${values.since.slice(0, 40)}"`,
      );
    sinceMs = since;
  }
  const limitText = values.limit ?? String(DEFAULT_LIMIT);
  const limit = /^[0-9]{1,5}$/.test(limitText) ? Number(limitText) : Number.NaN;
  if (!(limit >= 1 && limit <= MAX_AUDIT_PAGE)) throw new UsageError(`--limit must be a whole number from 1 to ${MAX_AUDIT_PAGE}`);
  if (values.config !== undefined && values.journal !== undefined) throw new UsageError("give --config or --journal, not both");
  const configFile = values.config ?? (values.journal === undefined ? process.env.FENCEGATE_CONFIG || undefined : undefined);
  let journal = values.journal;
  if (journal === undefined) {
    if (configFile === undefined) throw new UsageError("say where the journal is: --config FILE (the daemon's) or --journal FILE");
    journal = loadConfigFile(configFile).journal.path; // ConfigError: reported by main
  }
  return {
    actuator,
    journal,
    holder: values.holder,
    outcome: values.outcome as OutcomeFilter | undefined,
    sinceMs,
    limit,
    json: values.json ?? false,
  };
}

export async function main(argv: string[]): Promise<number> {
  let args: LogArgs | "help";
  try {
    args = parse(argv);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      return EXIT.CONFIG;
    }
    // Two lines: what is wrong, and the usage; the whole help would scroll the error away.
    console.error(`fencegate log: ${(err as Error).message}\n${HELP.split("\n")[0]}  (\`fencegate log --help\` for the options)`);
    return EXIT.USAGE;
  }
  if (args === "help") {
    console.log(HELP);
    return EXIT.OK;
  }
  let reader: AuditReader;
  let copy: string | null = null;
  try {
    ({ reader, copy } = openReader(args.journal));
  } catch (err) {
    if (!(err instanceof AuditError)) throw err;
    console.error(`fencegate log: ${err.message}`);
    return err.code === "JOURNAL_MISSING" ? EXIT.NO_JOURNAL : EXIT.JOURNAL;
  }
  try {
    const known = reader.actuators();
    if (!known.includes(args.actuator)) {
      console.error(`fencegate log: no actuator "${args.actuator}" in ${args.journal} (on record: ${known.join(", ") || "none"}).`);
      return EXIT.LOG_UNKNOWN_ACTUATOR;
    }
    const page = reader.page({
      actuator: args.actuator,
      holder: args.holder,
      outcome: args.outcome,
      sinceMs: args.sinceMs,
      limit: args.limit,
    });
    if (args.json) console.log(JSON.stringify(page.entries.map(jsonEntry)));
    else printTable(page.entries);
    if (page.nextBefore !== null) console.error(`(older commands match too: raise --limit, at most ${MAX_AUDIT_PAGE}, or narrow --since)`);
    return EXIT.OK;
  } catch (err) {
    if (!(err instanceof AuditError)) throw err;
    console.error(`fencegate log: ${copy === null ? err.message : err.message.replaceAll(copy, args.journal)}`);
    return EXIT.JOURNAL;
  } finally {
    reader.close();
    if (copy !== null) fs.rmSync(path.dirname(copy), { recursive: true, force: true });
  }
}

/**
 * The reader, on the journal itself or, on a read-only filesystem (a failing SD card the
 * kernel remounted read-only), on a copy of it and its -wal: SQLite cannot make the -shm
 * a WAL reader needs there, and nothing writes the files any more, so a copy is the same.
 */
function openReader(journal: string): { reader: AuditReader; copy: string | null } {
  try {
    return { reader: AuditReader.open(journal), copy: null };
  } catch (err) {
    if (!(err instanceof AuditError) || !onReadOnlyFilesystem(journal)) throw err;
  }
  const copy = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-log-")), path.basename(journal));
  try {
    fs.copyFileSync(journal, copy);
    if (fs.existsSync(`${journal}-wal`)) fs.copyFileSync(`${journal}-wal`, `${copy}-wal`);
    return { reader: AuditReader.open(copy), copy };
  } catch (err) {
    fs.rmSync(path.dirname(copy), { recursive: true, force: true });
    if (err instanceof AuditError) throw new AuditError(err.code, err.message.replaceAll(copy, journal));
    throw err;
  }
}

function onReadOnlyFilesystem(file: string): boolean {
  try {
    fs.accessSync(path.dirname(file), fs.constants.W_OK);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EROFS";
  }
}

function outcomeText(e: AuditEntry): string {
  const o = e.outcome;
  if (o.kind === "failed") return `${o.code}${o.modbusCode !== undefined ? ` (modbus ${o.modbusCode})` : ""}`;
  return o.kind;
}

function jsonEntry(e: AuditEntry) {
  return {
    id: e.id,
    at: e.atMs === null ? null : new Date(e.atMs).toISOString(),
    holder: e.holder,
    token: e.token,
    seq: e.seq,
    set: e.set,
    outcome: e.outcome,
  };
}

function printTable(entries: readonly AuditEntry[]): void {
  const rows = [
    ["TIME", "HOLDER", "TOKEN", "SEQ", "SET", "OUTCOME"],
    ...entries.map((e) => [
      e.atMs === null ? "-" : new Date(e.atMs).toISOString(),
      e.holder,
      String(e.token),
      String(e.seq),
      Object.entries(e.set)
        .map(([k, v]) => `${k}=${v}`)
        .join(" "),
      outcomeText(e),
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) console.log(r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  "));
}
