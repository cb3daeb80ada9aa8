/**
 * `fencegate start` (what `npm start` runs): the gateway on its embedded defaults, with
 * nothing to set up. It uses the local broker if one answers at the configured address
 * (else embeds one), starts the simulated actuator for every TCP bus on this machine, and
 * runs the daemon until Ctrl-C.
 */
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { startSimulator, type SimulatorHandle } from "../../firmware-bridge/src/simulator.ts";
import { loadConfigFile } from "../config/load.ts";
import type { GatewayConfig } from "../config/schema.ts";
import { localOrEmbeddedBroker } from "../dev/broker.ts";
import { PACKAGE_ROOT } from "../package-root.ts";
import { EXIT, serve } from "./daemon.ts";

export const EMBEDDED_CONFIG = join(PACKAGE_ROOT, "config/embedded.yaml");

const HELP = `usage: fencegate start [--config FILE]

Runs the gateway on its embedded defaults (config/embedded.yaml): the local MQTT broker if
one answers at the configured address, otherwise an embedded one (MQTT 3.1.1: use --mqtt3
with the CLI), and the simulated actuator for each bus on 127.0.0.1.

Then, from another terminal:
  fencegate status
  fencegate lease acquire valve-1 --ttl-ms 60000 --holder me
  fencegate send valve-1 position=42.5 --token <token> --holder me
  fencegate watch valve-1`;

/** Starts one simulator per TCP bus on loopback, answering the units of its actuators. */
export async function startLocalSimulators(config: GatewayConfig, stateDir: string): Promise<SimulatorHandle[]> {
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
      }),
    );
  }
  return sims;
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { config: { type: "string", short: "c" }, help: { type: "boolean", short: "h" } } });
  if (values.help) {
    console.log(HELP);
    return EXIT.OK;
  }
  const config = loadConfigFile(values.config ?? EMBEDDED_CONFIG);
  const url = new URL(config.mqtt.url);
  const broker = await localOrEmbeddedBroker(url.hostname, Number(url.port || 1883));
  const sims = await startLocalSimulators(config, dirname(config.journal.path));
  console.error(
    broker.embedded
      ? `fencegate: no broker answered at ${config.mqtt.url}; embedded one at ${broker.url} (MQTT 3.1.1: add --mqtt3 -b ${broker.url} to CLI commands)`
      : `fencegate: using the broker at ${broker.url}`,
  );
  console.error(`fencegate: simulated actuators: ${config.actuators.map((a) => a.id).join(", ")}. Try \`fencegate status\` in another terminal.`);
  try {
    return await serve({ ...config, mqtt: { ...config.mqtt, url: broker.url, protocolVersion: broker.protocolVersion } });
  } finally {
    await Promise.all(sims.map((s) => s.close()));
    await broker.close();
  }
}
