import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadConfigText } from "../../../src/config/load.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import type { ConfigError, ConfigProblem } from "../../../src/config/problems.ts";
import { minimalConfig } from "../../support/config-fixture.ts";
import { onlyProblem, pathsOf } from "../../support/config-problems.ts";

describe("cross-field checks", () => {
  it("the minimal fixture is valid", () => {
    expect(() => parseConfig(minimalConfig())).not.toThrow();
  });

  it("the audit trail's bounds: a commit starts before new commands are refused, and the lag stays below the stall deadline", () => {
    const c = minimalConfig();
    c.journal = { path: "/tmp/j.db", auditLagRecords: 500, auditQueueLimit: 400 };
    expect(onlyProblem(c)).toEqual({
      path: "journal.auditLagRecords",
      message: "Must be at most auditQueueLimit (400): a commit must start before new commands are refused.",
    });
    c.journal = { path: "/tmp/j.db", auditLagMs: 2000, commitStallMs: 1000 };
    expect(onlyProblem(c)).toEqual({ path: "journal.auditLagMs", message: "Must be below commitStallMs (1000)." });
  });

  it("the audit trail's settings are bounded and named with their unit", () => {
    const c = minimalConfig();
    c.journal = { path: "/tmp/j.db", auditLagMs: 0, auditLagRecords: 1.5, auditQueueLimit: 10, commitStallMs: 10 };
    expect(pathsOf(c)).toEqual(["journal.auditLagMs", "journal.auditLagRecords", "journal.auditQueueLimit", "journal.commitStallMs"]);
  });

  it("actuator ids must be unique", () => {
    const c = minimalConfig();
    c.actuators[1].id = "valve-1";
    expect(onlyProblem(c)).toEqual({
      path: "actuators[1].id",
      message: 'Actuator id "valve-1" is already used by actuators[0]; ids must be unique.',
    });
  });

  it("actuator ids must match the MQTT API's pattern", () => {
    const c = minimalConfig();
    c.actuators[0].id = "Valve 1";
    c.actuators[1].id = "x".repeat(65);
    expect(pathsOf(c)).toEqual(["actuators[0].id", "actuators[1].id"]);
  });

  it('the actuator id "gateway" is reserved for the gateway status topic', () => {
    const c = minimalConfig();
    c.actuators[1].id = "gateway";
    expect(onlyProblem(c).path).toBe("actuators[1].id");
  });

  it("every actuator's bus must exist, with a suggestion for a typo", () => {
    const c = minimalConfig();
    c.actuators[0].bus = "lin1";
    c.actuators[1].bus = "elsewhere";
    const [typo, unknown] = [onlyFor(c, "actuators[0].bus"), onlyFor(c, "actuators[1].bus")];
    expect(typo).toBe('No bus named "lin1" under buses (did you mean "line1"?).');
    expect(unknown).toBe('No bus named "elsewhere" under buses (buses defined: line1, plc).');
  });

  it("unit ids must be unique per bus", () => {
    const c = minimalConfig();
    c.actuators[1].unit = 1;
    expect(onlyProblem(c)).toEqual({
      path: "actuators[1].unit",
      message: 'Unit 1 on bus "line1" is already used by actuators[0]; each device on a bus needs its own unit id.',
    });
  });

  it("the same unit id on different buses is fine", () => {
    const c = minimalConfig();
    c.actuators[1].unit = 1;
    c.actuators[1].bus = "plc";
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("unit ids must be from 1 to 247", () => {
    const c = minimalConfig();
    c.actuators[0].unit = 0;
    c.actuators[1].unit = 248;
    expect(pathsOf(c)).toEqual(["actuators[0].unit", "actuators[1].unit"]);
  });

  it("two buses may not share a serial port", () => {
    const c = minimalConfig();
    c.buses.line2 = { type: "rtu", path: "/dev/ttyUSB0", baudRate: 9600 };
    expect(onlyProblem(c)).toEqual({
      path: "buses.line2.path",
      message: 'Serial port "/dev/ttyUSB0" is already used by bus "line1"; put all units on that port under one bus.',
    });
  });

  it("two buses on one Modbus TCP endpoint may not have an actuator on the same unit, naming both places", () => {
    const c = minimalConfig();
    c.buses = { a: { type: "tcp", host: "127.0.0.1", port: 15121 }, b: { type: "tcp", host: "127.0.0.1", port: 15121 } };
    c.actuators[0].bus = "a";
    c.actuators[1].bus = "b";
    c.actuators[1].unit = 1;
    expect(onlyProblem(c)).toEqual({
      path: "actuators[1].unit",
      message:
        'Unit 1 at 127.0.0.1:15121 is already actuators[0] (bus "a"): buses "a" and "b" reach the same device there. Give each device one actuator, on one bus.',
    });
  });

  it("the same endpoint spelled differently (case, a trailing dot, the default port) is the same endpoint", () => {
    const c = minimalConfig();
    c.buses = { a: { type: "tcp", host: "PLC.example.com." }, b: { type: "tcp", host: "plc.example.com", port: 502 } };
    c.actuators[0].bus = "a";
    c.actuators[1].bus = "b";
    c.actuators[1].unit = 1;
    expect(onlyProblem(c).message).toMatch(/^Unit 1 at plc\.example\.com:502 is already actuators\[0\]/);
  });

  it("two buses on one TCP endpoint with different units are fine (two connections to one Modbus gateway)", () => {
    const c = minimalConfig();
    c.buses = { a: { type: "tcp", host: "127.0.0.1", port: 15121 }, b: { type: "tcp", host: "127.0.0.1", port: 15121 } };
    c.actuators[0].bus = "a";
    c.actuators[1].bus = "b";
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("two buses whose serial paths are one device (a link and its target) are refused when the file is loaded", () => {
    const dir = mkdtempSync(join(tmpdir(), "fencegate-serial-"));
    try {
      writeFileSync(join(dir, "ttyUSB0"), "");
      symlinkSync(join(dir, "ttyUSB0"), join(dir, "usb-FTDI_A10KZ3Q1-if00-port0"));
      const c = minimalConfig();
      c.buses = {
        line1: { type: "rtu", path: join(dir, "usb-FTDI_A10KZ3Q1-if00-port0") },
        line2: { type: "rtu", path: join(dir, "ttyUSB0") },
      };
      c.actuators[1].bus = "line2";
      let problems: readonly ConfigProblem[] = [];
      try {
        loadConfigText(stringify(c), { file: join(dir, "gateway.yaml") });
      } catch (err) {
        problems = (err as ConfigError).problems;
      }
      expect(problems).toEqual([
        {
          path: "buses.line2.path",
          line: expect.any(Number),
          message: `Serial port "${join(dir, "ttyUSB0")}" is ${join(dir, "ttyUSB0")}, the same device as bus "line1"'s "${join(dir, "usb-FTDI_A10KZ3Q1-if00-port0")}"; put all units on that port under one bus.`,
        },
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a point's min must not exceed its max", () => {
    const c = minimalConfig();
    c.actuators[0].points.position.min = 60;
    c.actuators[0].points.position.max = 40;
    expect(onlyProblem(c)).toEqual({ path: "actuators[0].points.position.max", message: "Must be at least min (60)." });
  });

  it("a point's limits must fit its register type and scale", () => {
    const c = minimalConfig();
    c.actuators[0].points.position.max = 1000;
    expect(onlyProblem(c)).toEqual({
      path: "actuators[0].points.position.max",
      message: "A u16 with scale 0.01 can only hold 0 to 655.35; change max, type or scale.",
    });
  });

  it("a writable point needs min and max", () => {
    const c = minimalConfig();
    delete c.actuators[1].points.position.min;
    delete c.actuators[1].points.position.max;
    expect(pathsOf(c)).toEqual(["actuators[1].points.position.min", "actuators[1].points.position.max"]);
  });

  it("an input register cannot be writable", () => {
    const c = minimalConfig();
    c.actuators[1].points.position.table = "input";
    expect(onlyProblem(c).path).toBe("actuators[1].points.position.writable");
  });

  it("lease TTL bounds must satisfy min <= default <= max", () => {
    const low = minimalConfig();
    low.leases = { minTtlMs: 2000, defaultTtlMs: 1000, maxTtlMs: 60_000 };
    expect(onlyProblem(low)).toEqual({ path: "leases.defaultTtlMs", message: "Must be at least minTtlMs (2000)." });
    const high = minimalConfig();
    high.leases = { minTtlMs: 1000, defaultTtlMs: 90_000, maxTtlMs: 60_000 };
    expect(onlyProblem(high)).toEqual({ path: "leases.defaultTtlMs", message: "Must be at most maxTtlMs (60000)." });
    const inverted = minimalConfig();
    inverted.leases = { minTtlMs: 5000, defaultTtlMs: 5000, maxTtlMs: 4000 };
    expect(pathsOf(inverted)).toEqual(["leases.maxTtlMs", "leases.defaultTtlMs"]);
  });

  it("lease TTL bounds stay within 100 ms and 1 h", () => {
    const c = minimalConfig();
    c.leases = { minTtlMs: 99, maxTtlMs: 3_600_001 };
    expect(pathsOf(c)).toEqual(["leases.minTtlMs", "leases.maxTtlMs"]);
  });

  it("the default command deadline must not exceed the maximum", () => {
    const c = minimalConfig();
    c.commands = { defaultDeadlineMs: 10_000, maxDeadlineMs: 5000 };
    expect(onlyProblem(c).path).toBe("commands.defaultDeadlineMs");
  });

  it("a backoff's minMs must not exceed its maxMs", () => {
    const c = minimalConfig();
    c.buses.plc.reconnect = { minMs: 5000, maxMs: 1000 };
    expect(onlyProblem(c).path).toBe("buses.plc.reconnect.maxMs");
  });

  it("safe expiry values must name existing points", () => {
    const c = minimalConfig();
    c.actuators[0].expiry.set = { postion: 0 };
    expect(onlyProblem(c)).toEqual({
      path: "actuators[0].expiry.set.postion",
      message: 'No point "postion" on this actuator (did you mean "position"?).',
    });
  });

  it("safe expiry values must name writable points", () => {
    const c = minimalConfig();
    c.actuators[0].expiry.set = { position: 0, actual: 0 };
    expect(onlyProblem(c).path).toBe("actuators[0].expiry.set.actual");
  });

  it("safe expiry values must lie within the point's limits", () => {
    const c = minimalConfig();
    c.actuators[0].expiry.set = { position: 120 };
    expect(onlyProblem(c)).toEqual({ path: "actuators[0].expiry.set.position", message: "Must lie within the point's limits, 0 to 100." });
  });

  it("a safe expiry policy needs at least one value", () => {
    const c = minimalConfig();
    c.actuators[0].expiry.set = {};
    expect(onlyProblem(c).path).toBe("actuators[0].expiry.set");
  });

  it("point registers of one actuator must not overlap, 32-bit types taking two", () => {
    const c = minimalConfig();
    c.actuators[0].points.total = { register: 99, type: "u32" };
    expect(onlyProblem(c)).toEqual({
      path: "actuators[0].points.total.register",
      message: 'Overlaps point "position" (holding register 100); give each point its own registers.',
    });
  });

  it("the same register number in the holding and input tables does not overlap", () => {
    const c = minimalConfig();
    c.actuators[0].points.actual.register = 100;
    c.actuators[0].points.actual.table = "input";
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("authenticated commands are a yes or no per actuator", () => {
    const c = minimalConfig();
    c.actuators[0].authenticatedCommands = true;
    expect(parseConfig(c).actuators[0]!.authenticatedCommands).toBe(true);
    c.actuators[0].authenticatedCommands = "yes";
    expect(onlyProblem(c).path).toBe("actuators[0].authenticatedCommands");
  });
});

function onlyFor(value: unknown, path: string): string | undefined {
  try {
    parseConfig(value);
  } catch (err) {
    return (err as { problems: { path: string; message: string }[] }).problems.find((p) => p.path === path)?.message;
  }
  return undefined;
}
