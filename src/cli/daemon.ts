/** `fencegate daemon --config FILE`: the gateway itself. */
import { parseCommandLine } from "./args.ts";
import { pino } from "pino";
import { ConfigError } from "../config/problems.ts";
import { loadConfigFile } from "../config/load.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { SystemdNotifier } from "../adapters/systemd/notify.ts";
import { HttpListenError } from "../adapters/http/metrics.ts";
import { LeftGroupError, startDaemon } from "../daemon/index.ts";
import { JournalError } from "../shell/ports.ts";
import { ActuatorConflictError, DuplicateGatewayError } from "../adapters/mqtt/presence.ts";
import { LOG_FORMATS, prettyDestination, type LogFormat } from "./pretty-log.ts";
import { EXIT } from "../exit-codes.ts";

/** 78 (EX_CONFIG) also when a port the configuration names is in use: the setting is named. */
const HELP = `usage: fencegate daemon --config FILE [--log-level LEVEL] [--log-format pretty|json]

Runs the gateway: owns the Modbus buses, answers the MQTT API, keeps the journal.

options:
  -c, --config FILE     the YAML configuration (see config/*.yaml)
      --log-level LEVEL override logging.level (trace|debug|info|warn|error|fatal)
      --log-format F    pretty (one line per decision; the default on a terminal) or
                        json (pino; the default otherwise, e.g. under systemd)
  -h, --help            this text

examples:
  fencegate daemon --config /etc/fencegate/gateway.yaml
  fencegate daemon -c config/embedded.yaml --log-level debug

exit codes: 0 stopped cleanly, 64 usage, 74 journal missing (see fencegate journal init),
            unreadable, failing or missing committed history (see fencegate journal
            recover), 78 configuration invalid, a port it names in use, another gateway
            with the same gatewayId on the broker, or SQLite not installed or built for
            another Node (the message says how)`;

export async function main(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseCommandLine(
      argv,
      {
        config: { type: "string", short: "c" },
        "log-level": { type: "string" },
        "log-format": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      false,
    ));
  } catch (err) {
    console.error(`fencegate daemon: ${(err as Error).message}\n${HELP.split("\n")[0]}  (\`fencegate daemon --help\` for the options)`);
    return EXIT.USAGE;
  }
  if (values.help) {
    console.log(HELP);
    return EXIT.OK;
  }
  const format = values["log-format"];
  if (!values.config || (format !== undefined && !LOG_FORMATS.includes(format as LogFormat))) {
    console.error(
      `fencegate daemon: ${values.config ? "--log-format is pretty or json" : "--config is required"}\nusage: fencegate daemon --config FILE [--log-level LEVEL] [--log-format pretty|json]`,
    );
    return EXIT.USAGE;
  }
  return runDaemon(values.config, values["log-level"], format as LogFormat | undefined);
}

/** The configuration, or null after printing every problem in it (exit with EXIT.CONFIG). */
export function loadConfigOrSay(configPath: string): GatewayConfig | null {
  try {
    return loadConfigFile(configPath);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(err.message);
    return null;
  }
}

/** Whether `err` is a listen on `port` refused because another process has it. */
export function portInUse(err: unknown, port: number): boolean {
  const e = err as { code?: unknown; port?: unknown };
  return e?.code === "EADDRINUSE" && (e.port === undefined || e.port === port);
}

/** Loads the configuration, runs the daemon until SIGTERM/SIGINT, returns the exit code. */
async function runDaemon(configPath: string, logLevel?: string, logFormat?: LogFormat): Promise<number> {
  const config = loadConfigOrSay(configPath);
  return config === null ? EXIT.CONFIG : serve(config, logLevel, configPath, logFormat);
}

const LOG_CHUNK_BYTES = 8 * 1024; // below sonic-boom's largest single write (16 KiB)
const LOG_FLUSH_MS = 200;

/**
 * Runs the daemon on a loaded configuration until SIGTERM/SIGINT or a fatal journal error.
 * `configPath` (when it came from a file) completes the commands a refusal tells one to run.
 */
export async function serve(
  config: GatewayConfig,
  logLevel?: string,
  configPath?: string,
  logFormat: LogFormat = process.stdout.isTTY ? "pretty" : "json",
): Promise<number> {
  // JSON: buffered, asynchronous stdout: lines leave in writes of LOG_CHUNK_BYTES, or every
  // LOG_FLUSH_MS, so a log line for every decision costs no write of its own under load
  // (each write is a hop to libuv's thread pool: 13 % of the daemon's CPU at 16 busy
  // actuators when every line had one). Flushed before returning. Pretty: a person at a
  // terminal, one line at a time as it happens.
  const destination =
    logFormat === "pretty"
      ? prettyDestination(process.stdout)
      : pino.destination({ dest: 1, sync: false, minLength: LOG_CHUNK_BYTES, periodicFlush: LOG_FLUSH_MS });
  const log = pino({ level: logLevel ?? config.logging.level }, destination);
  const flushed = (code: number) => new Promise<number>((resolve) => log.flush(() => resolve(code)));
  let daemon;
  try {
    daemon = await startDaemon(config, log);
  } catch (err) {
    if (err instanceof DuplicateGatewayError || err instanceof ActuatorConflictError) {
      log.fatal({ gatewayId: config.gatewayId, broker: config.mqtt.url }, err.message);
      return flushed(EXIT.CONFIG);
    }
    if (err instanceof LeftGroupError) {
      log.fatal(
        {
          code: "JOURNAL_IN_GROUP",
          journal: err.journalPath,
          group: err.group,
          ...(configPath !== undefined ? { leaveGroup: `fencegate journal leave-group --config ${configPath}` } : {}),
        },
        err.message,
      );
      return flushed(EXIT.CONFIG);
    }
    if (err instanceof JournalError) {
      const command =
        configPath === undefined
          ? {}
          : err.code === "JOURNAL_LOST_HISTORY"
            ? { recover: `fencegate journal recover --config ${configPath}` }
            : err.code === "JOURNAL_MISSING"
              ? { init: `fencegate journal init --config ${configPath}` }
              : {};
      log.fatal({ code: err.code, journal: config.journal.path, ...command }, err.message);
      return flushed(EXIT.JOURNAL);
    }
    if (err instanceof HttpListenError) {
      const { host, port } = config.metrics;
      log.fatal({ setting: err.setting, host, port }, err.message);
      return flushed(EXIT.CONFIG);
    }
    log.fatal({ err }, `the daemon could not start: ${err instanceof Error ? err.message : String(err)}`);
    return flushed(EXIT.INTERNAL);
  }
  // Under systemd (Type=notify, WatchdogSec=): ready once the journal is loaded and the
  // buses and MQTT are starting; neither the broker nor a device has to be up for that.
  const systemd = SystemdNotifier.fromEnvironment({ log });
  if (systemd) {
    await systemd.ready(`serving ${config.actuators.length} actuator(s); journal ${config.journal.path}`);
    systemd.startWatchdog(() => daemon.healthProblem());
  }
  const signalled = new Promise<number>((resolve) => {
    const onSignal = (signal: string) => {
      log.info({ signal }, "stopping");
      process.once(signal, () => process.exit(EXIT.INTERNAL)); // a second signal: stop now
      resolve(EXIT.OK);
    };
    process.once("SIGTERM", () => onSignal("SIGTERM"));
    process.once("SIGINT", () => onSignal("SIGINT"));
  });
  const code = await Promise.race([signalled, daemon.fatal]);
  await systemd?.stopping();
  await daemon.stop();
  return flushed(code);
}
