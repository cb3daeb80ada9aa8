import { FENCED } from "../../../packages/protocol/src/modbus-profile.ts";
import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { actuatorCoreConfig } from "../../../src/config/core.ts";
import { loadConfigFile } from "../../../src/config/load.ts";

const CONFIG_DIR = resolve(import.meta.dirname, "../../../config");
const examples = readdirSync(CONFIG_DIR).filter((f) => f.endsWith(".yaml"));

describe("example configuration files", () => {
  it("there are the three documented examples", () => {
    expect(examples).toEqual(expect.arrayContaining(["embedded.yaml", "modbus-tcp.yaml", "pi-rs485.yaml"]));
  });

  for (const file of examples) {
    it(`${file} loads without problems and maps every actuator for the core`, () => {
      const config = loadConfigFile(join(CONFIG_DIR, file));
      for (const a of config.actuators) expect(() => actuatorCoreConfig(config, a.id)).not.toThrow();
    });
  }

  it("embedded.yaml is a local broker and one fenced valve-1 on the TCP simulator", () => {
    const config = loadConfigFile(join(CONFIG_DIR, "embedded.yaml"));
    expect(config.mqtt.url).toBe("mqtt://127.0.0.1:1883");
    expect(config.mqtt.username).toBeUndefined();
    expect(config.actuators.map((a) => [a.id, a.profile, a.unit])).toEqual([["valve-1", "fenced", 1]]);
    expect(config.buses[config.actuators[0]!.bus]).toMatchObject({ type: "tcp", host: "127.0.0.1", port: 15020 });
    expect(config.journal.path).toBe(resolve(CONFIG_DIR, "../var/fencegate.db"));
  });

  it("pi-rs485.yaml reads its password from the file next to it", () => {
    const config = loadConfigFile(join(CONFIG_DIR, "pi-rs485.yaml"));
    expect(config.mqtt.passwordFile).toBe(join(CONFIG_DIR, "mqtt-password"));
    expect(config.mqtt.password).toBeTruthy();
    expect(config.buses.rs485).toMatchObject({ type: "rtu", parity: "even", baudRate: 19_200 });
    expect(config.actuators.map((a) => [a.id, a.profile])).toEqual([
      ["valve-1", "fenced"],
      ["valve-2", "fenced"],
      ["damper-1", "plain"],
    ]);
  });

  it("the reference valve's points are the fenced profile's registers in every example", () => {
    for (const file of ["embedded.yaml", "pi-rs485.yaml"]) {
      const config = loadConfigFile(join(CONFIG_DIR, file));
      for (const a of config.actuators.filter((x) => x.profile === "fenced")) {
        const registers = Object.fromEntries(Object.entries(a.points).map(([name, p]) => [name, p.register]));
        expect(registers, `${file} ${a.id}`).toEqual({
          position: FENCED.TARGET_POSITION,
          actual: FENCED.ACTUAL_POSITION,
          status: FENCED.STATUS,
          faults: FENCED.FAULTS,
        });
      }
    }
  });
});
