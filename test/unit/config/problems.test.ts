import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfigFile, loadConfigText } from "../../../src/config/load.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { ConfigError } from "../../../src/config/problems.ts";
import { minimalConfig } from "../../support/config-fixture.ts";
import { onlyProblem, pathsOf, problemsOf } from "../../support/config-problems.ts";

function loadError(text: string): ConfigError {
  try {
    loadConfigText(text);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error("expected the configuration to be refused");
}

describe("reporting every problem at once", () => {
  it("a configuration with many problems reports all of them, each at its path", () => {
    const c = minimalConfig();
    c.gatewayId = "Gateway 1";
    c.mqtt.keepaliveS = 2;
    c.mqtt.protocolVersion = 3;
    c.buses.line1.parity = "evn";
    c.buses.plc.port = 70000;
    c.actuators[0].unit = 0;
    c.actuators[0].points.position.max = "100";
    c.actuators[1].bus = "nope";
    c.actuators[1].pollIntervalMs = 1.5;
    c.commands = { queueLimit: 5000 };
    c.leases = { minTtlMs: 50 };
    expect(pathsOf(c).sort()).toEqual(
      [
        "gatewayId",
        "mqtt.keepaliveS",
        "mqtt.protocolVersion",
        "buses.line1.parity",
        "buses.plc.port",
        "actuators[0].unit",
        "actuators[0].points.position.max",
        "actuators[1].bus",
        "actuators[1].pollIntervalMs",
        "commands.queueLimit",
        "leases.minTtlMs",
      ].sort(),
    );
  });

  it("a type error in one actuator does not hide cross-field problems elsewhere", () => {
    const c = minimalConfig();
    c.actuators[0].points.actual.register = "x";
    c.actuators[1].id = "valve-1";
    expect(pathsOf(c).sort()).toEqual(["actuators[0].points.actual.register", "actuators[1].id"]);
  });

  it("messages say what to do in plain words", () => {
    const c = minimalConfig();
    c.actuators[0].unit = 300;
    c.buses.line1.parity = "evn";
    const messages = Object.fromEntries(problemsOf(c).map((p) => [p.path, p.message]));
    expect(messages["actuators[0].unit"]).toBe("Must be a whole number from 1 to 247.");
    expect(messages["buses.line1.parity"]).toBe('Must be one of "none", "even" or "odd", not the text "evn" (did you mean "even"?).');
  });

  it("a missing required setting is reported at its own path", () => {
    const c = minimalConfig();
    delete c.actuators[1].profile;
    expect(onlyProblem(c)).toEqual({
      path: "actuators[1].profile",
      message: 'Required: this setting is missing; it is one of "fenced" or "plain".',
    });
    const d = minimalConfig();
    delete d.actuators[1].unit;
    expect(onlyProblem(d)).toEqual({ path: "actuators[1].unit", message: "Required: this setting is missing." });
  });

  it("an empty configuration is one problem, not a crash", () => {
    expect(onlyProblem(null).path).toBe("");
  });

  it("the ConfigError message lists every problem on its own line", () => {
    const c = minimalConfig();
    c.actuators[0].unit = 0;
    c.commands = { queueLimit: 0 };
    let error: unknown;
    try {
      parseConfig(c, { source: "/etc/fencegate.yaml" });
    } catch (err) {
      error = err;
    }
    expect((error as Error).message.split("\n")).toEqual([
      "Configuration /etc/fencegate.yaml has 2 problems:",
      "  - actuators[0].unit: Must be a whole number from 1 to 247.",
      "  - commands.queueLimit: Must be a whole number from 1 to 1024.",
    ]);
  });
});

describe("unknown settings", () => {
  it("an unknown key is an error that suggests the likely intended key", () => {
    const c = minimalConfig();
    c.mqtt.keepalive = 30;
    expect(onlyProblem(c)).toEqual({ path: "mqtt.keepalive", message: 'Unknown setting "keepalive" (did you mean "keepaliveS"?).' });
  });

  it("several unknown keys in one object are one problem each", () => {
    const c = minimalConfig();
    c.actuators[0].points.position.writeable = true;
    c.actuators[0].points.position.colour = "red";
    const problems = problemsOf(c);
    expect(problems.map((p) => p.path)).toEqual(["actuators[0].points.position.writeable", "actuators[0].points.position.colour"]);
    expect(problems[0]!.message).toContain('did you mean "writable"?');
    expect(problems[1]!.message).toContain("known settings here: register, table, type");
  });

  it("an unknown bus type names the valid ones", () => {
    const c = minimalConfig();
    c.buses.plc.type = "modbus";
    expect(onlyProblem(c)).toEqual({ path: "buses.plc.type", message: 'Must be one of "rtu" or "tcp".' });
  });
});

describe("YAML files", () => {
  it("a YAML syntax error is reported with its line and column", () => {
    const error = loadError("gatewayId: gw1\nmqtt:\n  url: [mqtt://x\nbuses: {}\n");
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatchObject({ path: "", line: 4, column: 1 });
    expect(error.problems[0]!.message).toMatch(/^YAML syntax error: /);
  });

  it("a duplicated key in the YAML is a syntax error at its line", () => {
    const error = loadError("gatewayId: gw1\ngatewayId: gw2\n");
    expect(error.problems[0]).toMatchObject({ path: "", line: 2 });
    expect(error.problems[0]!.message).toContain("unique");
  });

  it("validation problems carry the line of the offending setting, in file order", () => {
    const text = [
      "gatewayId: gw1",
      "mqtt:",
      "  url: mqtt://127.0.0.1",
      "buses:",
      "  line1: { type: rtu, path: /dev/ttyUSB0 }",
      "actuators:",
      "  - id: valve-1",
      "    bus: line2",
      "    unit: 1",
      "    profile: fenced",
      "    points:",
      "      position: { register: 100, min: 0, max: 100, writable: true }",
      "commands:",
      "  queueLimit: 0",
    ].join("\n");
    const error = loadError(text);
    expect(error.problems).toEqual([
      { path: "actuators[0].bus", line: 8, message: 'No bus named "line2" under buses (did you mean "line1"?).' },
      { path: "commands.queueLimit", line: 14, message: "Must be a whole number from 1 to 1024." },
    ]);
  });

  it("a file that does not exist is one problem naming it", () => {
    const dir = mkdtempSync(join(tmpdir(), "fencegate-config-"));
    expect(() => loadConfigFile(join(dir, "missing.yaml"))).toThrow(/missing\.yaml has 1 problem:\n.*no such file/);
  });

  it("an empty file is reported as empty", () => {
    const dir = mkdtempSync(join(tmpdir(), "fencegate-config-"));
    writeFileSync(join(dir, "empty.yaml"), "# nothing yet\n");
    expect(() => loadConfigFile(join(dir, "empty.yaml"))).toThrow(/The configuration is empty/);
  });
});

describe("robustness", () => {
  it("any section or entry of the wrong type is a problem at its path, never a crash", () => {
    const places: ((c: Record<string, any>, v: unknown) => void)[] = [
      (c, v) => (c.mqtt = v),
      (c, v) => (c.mqtt.tls = v),
      (c, v) => (c.mqtt.reconnect = v),
      (c, v) => (c.buses = v),
      (c, v) => (c.buses.line1 = v),
      (c, v) => (c.actuators = v),
      (c, v) => (c.actuators[0] = v),
      (c, v) => (c.actuators[0].points = v),
      (c, v) => (c.actuators[0].points.position = v),
      (c, v) => (c.actuators[0].expiry = v),
      (c, v) => (c.actuators[0].expiry.set = v),
      (c, v) => (c.leases = v),
      (c, v) => (c.commands = v),
    ];
    for (const [i, place] of places.entries()) {
      for (const bad of [null, "text", 7, [1, 2], true]) {
        const c = minimalConfig();
        place(c, bad);
        expect(problemsOf(c).length, `place ${i}, value ${JSON.stringify(bad)}`).toBeGreaterThan(0);
      }
    }
    for (const bad of ["text", 7, [1, 2], true]) expect(problemsOf(bad).length).toBeGreaterThan(0);
  });
});
