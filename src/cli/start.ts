/**
 * `fencegate start` (what `npm start` runs): the gateway on its embedded defaults, with
 * nothing to set up. It uses the local broker if one answers at the configured address
 * (else embeds one), starts the simulated actuator for every TCP bus on this machine, and
 * runs the daemon until Ctrl-C.
 */
import { accessSync, constants, existsSync, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join } from "node:path";
import { parseCommandLine } from "./args.ts";
import { startSimulator, type SimulatorHandle } from "../../firmware-bridge/src/simulator.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { localOrEmbeddedBroker } from "../dev/broker.ts";
import { PACKAGE_ROOT } from "../package-root.ts";
import { loadConfigOrSay, portInUse, serve } from "./daemon.ts";
import { EXIT } from "../exit-codes.ts";

export const EMBEDDED_CONFIG = join(PACKAGE_ROOT, "config/embedded.yaml");

const HELP = `usage: fencegate start [--config FILE]

Runs the gateway on its embedded defaults (config/embedded.yaml): the local MQTT broker if
one answers at the configured address, otherwise an embedded one (MQTT 3.1.1; the CLI
falls back to it by itself), and the simulated actuator for each bus on 127.0.0.1.

Then, from another terminal:
  npx fencegate status
  npx fencegate lease acquire valve-1 --ttl-ms 60000 --holder me
  npx fencegate send valve-1 position=42.5 --token <token> --holder me
  npx fencegate watch valve-1

exit codes: 0 stopped cleanly, 64 usage, 74 journal unreadable or failing,
            78 configuration invalid or a port it names in use`;

/** Starts one simulator per TCP bus on loopback, answering the units of its actuators. */
async function startLocalSimulators(config: GatewayConfig, stateDir: string): Promise<SimulatorHandle[]> {
  const sims: SimulatorHandle[] = [];
  for (const [name, bus] of Object.entries(config.buses)) {
    if (bus.type !== "tcp" || (bus.host !== "127.0.0.1" && bus.host !== "localhost")) continue;
    const actuators = config.actuators.filter((a) => a.bus === name);
    if (actuators.length === 0) continue;
    mkdirSync(stateDir, { recursive: true });
    sims.push(
      await startSimulator({
        tcp: { host: "127.0.0.1", port: bus.port },
        units: actuators.map((a) => a.unit),
        profile: actuators[0]!.profile,
        stateFile: join(stateDir, `sim-${name}.json`),
        rate: 20,
      }).catch((err: unknown) => {
        throw portInUse(err, bus.port) ? new PortInUseError(`buses.${name}.port`, bus.host, bus.port, "the simulated actuator") : err;
      }),
    );
  }
  return sims;
}

/**
 * The embedded defaults keep their state in the package's var/ (a checkout's). Installed
 * with npm install -g the package may not be writable by the user: then the user's state
 * directory ($XDG_STATE_HOME/fencegate, else ~/.local/state/fencegate), said in a line.
 */
function withWritableState(config: GatewayConfig): GatewayConfig {
  const dir = dirname(config.journal.path);
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
    return config;
  } catch {
    const state = join(process.env["XDG_STATE_HOME"] || join(homedir(), ".local/state"), "fencegate");
    mkdirSync(state, { recursive: true });
    console.error(`fencegate: ${dir} is not writable; keeping the journal and the simulator's state in ${state}`);
    return { ...config, journal: { ...config.journal, path: join(state, basename(config.journal.path)) } };
  }
}

/** A port the configuration names is taken by another process. */
class PortInUseError extends Error {
  constructor(setting: string, host: string, port: number, what: string) {
    super(
      `fencegate: port ${port} on ${host} (${setting}, for ${what}) is in use by another process: stop that process (another \`fencegate start\`?) or choose another ${setting}.`,
    );
  }
}

export async function main(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseCommandLine(argv, { config: { type: "string", short: "c" }, help: { type: "boolean", short: "h" } }, false));
  } catch (err) {
    console.error(`fencegate start: ${(err as Error).message}\nusage: fencegate start [--config FILE]`);
    return EXIT.USAGE;
  }
  if (values.help) {
    console.log(HELP);
    return EXIT.OK;
  }
  const loaded = loadConfigOrSay(values.config ?? EMBEDDED_CONFIG);
  if (loaded === null) return EXIT.CONFIG;
  const config = values.config === undefined ? withWritableState(loaded) : loaded;
  const url = new URL(config.mqtt.url);
  const brokerPort = Number(url.port || 1883);
  let broker;
  let sims: SimulatorHandle[] = [];
  try {
    broker = await localOrEmbeddedBroker(url.hostname, brokerPort).catch((err: unknown) => {
      throw portInUse(err, brokerPort) ? new PortInUseError("mqtt.url", url.hostname, brokerPort, "the embedded MQTT broker") : err;
    });
    sims = await startLocalSimulators(config, dirname(config.journal.path));
  } catch (err) {
    await broker?.close();
    if (!(err instanceof PortInUseError)) throw err;
    console.error(err.message);
    return EXIT.CONFIG;
  }
  console.error(
    broker.embedded
      ? `fencegate: no broker answered at ${config.mqtt.url}; embedded one at ${broker.url} (MQTT 3.1.1; the CLI falls back to it by itself)`
      : `fencegate: using the broker at ${broker.url}`,
  );
  const cli = existsSync(join(PACKAGE_ROOT, "src")) ? "npx fencegate" : "fencegate"; // a checkout, or the installed package
  console.error(
    `fencegate: simulated actuators: ${config.actuators.map((a) => a.id).join(", ")}. Try \`${cli} status\` in another terminal.`,
  );
  try {
    return await serve({ ...config, mqtt: { ...config.mqtt, url: broker.url, protocolVersion: broker.protocolVersion } });
  } finally {
    await Promise.all(sims.map((s) => s.close()));
    await broker.close();
  }
}
