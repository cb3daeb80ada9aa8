/** `fencegate daemon --config FILE`: the gateway itself. */
import { parseArgs } from "node:util";
import { pino } from "pino";
import { ConfigError } from "../config/problems.ts";
import { loadConfigFile } from "../config/load.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { SystemdNotifier } from "../adapters/systemd/notify.ts";
import { startDaemon } from "../daemon.ts";
import { JournalError } from "../shell/ports.ts";
import { DuplicateGatewayError } from "../adapters/mqtt/presence.ts";

export const EXIT = { OK: 0, USAGE: 64, CONFIG: 78, JOURNAL: 74, INTERNAL: 70 } as const;

const HELP = `usage: fencegate daemon --config FILE [--log-level LEVEL]

Runs the gateway: owns the Modbus buses, answers the MQTT API, keeps the journal.

options:
  -c, --config FILE     the YAML configuration (see config/*.yaml)
      --log-level LEVEL override logging.level (trace|debug|info|warn|error|fatal)
  -h, --help            this text

examples:
  fencegate daemon --config /etc/fencegate/gateway.yaml
  fencegate daemon -c config/embedded.yaml --log-level debug

exit codes: 0 stopped cleanly, 64 usage, 74 journal unreadable, failing or missing committed
            history (see fencegate journal recover), 78 configuration invalid or another
            gateway with the same gatewayId on the broker`;

export async function main(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { config: { type: "string", short: "c" }, "log-level": { type: "string" }, help: { type: "boolean", short: "h" } },
      strict: true,
    }));
  } catch (err) {
    console.error(`fencegate daemon: ${(err as Error).message}\n\n${HELP}`);
    return EXIT.USAGE;
  }
  if (values.help) {
    console.log(HELP);
    return EXIT.OK;
  }
  if (!values.config) {
    console.error(`fencegate daemon: --config is required\n\n${HELP}`);
    return EXIT.USAGE;
  }
  return runDaemon(values.config, values["log-level"]);
}

/** Loads the configuration, runs the daemon until SIGTERM/SIGINT, returns the exit code. */
export async function runDaemon(configPath: string, logLevel?: string): Promise<number> {
  let config;
  try {
    config = loadConfigFile(configPath);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      return EXIT.CONFIG;
    }
    throw err;
  }
  return serve(config, logLevel, configPath);
}

const LOG_CHUNK_BYTES = 8 * 1024; // below sonic-boom's largest single write (16 KiB)
const LOG_FLUSH_MS = 200;

/**
 * Runs the daemon on a loaded configuration until SIGTERM/SIGINT or a fatal journal error.
 * `configPath` (when it came from a file) completes the commands a refusal tells one to run.
 */
export async function serve(config: GatewayConfig, logLevel?: string, configPath?: string): Promise<number> {
  // Buffered, asynchronous stdout: lines leave in writes of LOG_CHUNK_BYTES, or every
  // LOG_FLUSH_MS, so a log line for every decision costs no write of its own under load
  // (each write is a hop to libuv's thread pool: 13 % of the daemon's CPU at 16 busy
  // actuators when every line had one). Flushed before returning.
  const destination = pino.destination({ dest: 1, sync: false, minLength: LOG_CHUNK_BYTES, periodicFlush: LOG_FLUSH_MS });
  const log = pino({ level: logLevel ?? config.logging.level }, destination);
  const flushed = (code: number) => new Promise<number>((resolve) => log.flush(() => resolve(code)));
  let daemon;
  try {
    daemon = await startDaemon(config, log);
  } catch (err) {
    if (err instanceof DuplicateGatewayError) {
      log.fatal({ gatewayId: config.gatewayId, broker: config.mqtt.url }, err.message);
      return flushed(EXIT.CONFIG);
    }
    if (err instanceof JournalError) {
      const recover = err.code === "JOURNAL_LOST_HISTORY" && configPath !== undefined ? { recover: `fencegate journal recover --config ${configPath}` } : {};
      log.fatal({ code: err.code, journal: config.journal.path, ...recover }, err.message);
      return flushed(EXIT.JOURNAL);
    }
    log.fatal({ err: String(err) }, `the daemon could not start: ${err instanceof Error ? err.message : String(err)}`);
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
