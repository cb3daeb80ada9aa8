import { afterEach, describe, expect, it, vi } from "vitest";
import { main, parseSimArgs } from "../src/cli.ts";

afterEach(() => vi.restoreAllMocks());

describe("fencegate sim arguments", () => {
  it("parses the serial form with its 8E1 defaults", () => {
    expect(parseSimArgs(["--serial", "/dev/ttyX", "--unit", "1", "--baud", "115200", "--state", "s.json"])).toMatchObject({
      serial: { path: "/dev/ttyX", baud: 115200, parity: "even", stopBits: 1 },
      units: [1],
      profile: "fenced",
      profileVersion: "1.1",
      stateFile: "s.json",
      watchdogMs: 0,
      lineRate: false,
      loseUnsynced: false,
    });
  });

  it("parses the TCP form with several units and every option", () => {
    const o = parseSimArgs([
      "--tcp",
      "127.0.0.1:1502",
      "--unit",
      "1,2,3",
      "--profile",
      "plain",
      "--watchdog-ms",
      "500",
      "--safe-position",
      "12.5",
      "--rate",
      "5",
      "--line-rate",
      "--lose-unsynced",
      "--control",
      "/tmp/c.sock",
      "--parity",
      "none",
      "--stop-bits",
      "2",
      "--profile-version",
      "1.0",
    ]);
    expect(o).toMatchObject({
      tcp: { host: "127.0.0.1", port: 1502 },
      units: [1, 2, 3],
      profile: "plain",
      profileVersion: "1.0",
      watchdogMs: 500,
      safePosition: 12.5,
      rate: 5,
      lineRate: true,
      loseUnsynced: true,
      control: "/tmp/c.sock",
    });
  });

  it("rejects missing or doubled transports, bad numbers and unknown flags", () => {
    expect(() => parseSimArgs([])).toThrow(/exactly one/);
    expect(() => parseSimArgs(["--serial", "a", "--tcp", "h:1"])).toThrow(/exactly one/);
    expect(() => parseSimArgs(["--serial", "a", "--baud", "fast"])).toThrow(/not a number/);
    expect(() => parseSimArgs(["--serial", "a", "--profile", "x"])).toThrow(/fenced or plain/);
    expect(() => parseSimArgs(["--serial", "a", "--profile-version", "2.0"])).toThrow(/1.0 or 1.1/);
    expect(() => parseSimArgs(["--serial", "a", "--bogus"])).toThrow();
  });

  it("--help prints the usage and exits 0; a usage error exits 64", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    const err = vi.spyOn(console, "error").mockImplementation(() => undefined);
    expect(await main(["--help"])).toBe(0);
    expect(String(log.mock.calls[0]?.[0])).toMatch(/--serial DEV/);
    expect(await main(["--nope"])).toBe(64);
    expect(err).toHaveBeenCalled();
  });
});
