/**
 * Configuration refused where it would make the gateway report what did not happen or wait
 * past its deadlines: scales that overflow a
 * point, metrics beyond loopback without an explicit choice, bus timeouts longer than the
 * deadlines they serve, and the write function per actuator.
 */
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../../src/config/parse.ts";
import { isLoopbackHost } from "../../../src/config/schema.ts";
import { minimalConfig } from "../../support/config-fixture.ts";
import { onlyProblem, pathsOf, problemsOf } from "../../support/config-problems.ts";

describe("point scales", () => {
  it("refuses scale 1e300 on a u32: its range times the scale is not a finite number", () => {
    const c = minimalConfig();
    c.actuators[0].points.total = { register: 102, type: "u32", scale: 1e300 };
    expect(onlyProblem(c)).toEqual({
      path: "actuators[0].points.total.scale",
      message: "A u32 with scale 1e+300 overflows: its raw range times the scale is not a finite number; use a smaller scale.",
    });
  });

  it("takes the largest scales that still fit (1e290 on a u32)", () => {
    const c = minimalConfig();
    c.actuators[0].points.total = { register: 102, type: "u32", scale: 1e290 };
    expect(parseConfig(c).actuators[0]!.points.total!.max).toBeLessThan(Number.POSITIVE_INFINITY);
  });

  it("refuses a scale on an f32, which is never scaled", () => {
    const c = minimalConfig();
    c.actuators[0].points.flow = { register: 102, type: "f32", scale: 0.1 };
    expect(onlyProblem(c).path).toBe("actuators[0].points.flow.scale");
  });
});

describe("the metrics listener", () => {
  it.each(["127.0.0.1", "127.0.0.53", "::1", "localhost"])("%s is loopback", (host) => {
    expect(isLoopbackHost(host)).toBe(true);
  });

  it.each(["0.0.0.0", "::", "10.0.0.5", "gw.local", "128.0.0.1"])("%s is not", (host) => {
    expect(isLoopbackHost(host)).toBe(false);
  });

  it("refuses host 0.0.0.0 without metrics.allowNonLoopback, and says what it would expose", () => {
    const c = minimalConfig();
    c.metrics = { host: "0.0.0.0" };
    const problem = onlyProblem(c);
    expect(problem.path).toBe("metrics.host");
    expect(problem.message).toMatch(/without authentication.*allowNonLoopback: true/);
  });

  // Adapted: the status page, on by default on this port, needs credentials
  // beyond loopback; allowNonLoopback alone serves /metrics and /healthz with the page off.
  it("takes another address with allowNonLoopback: true", () => {
    const c = minimalConfig();
    c.metrics = { host: "0.0.0.0", allowNonLoopback: true, statusPage: { enabled: false } };
    expect(parseConfig(c).metrics).toMatchObject({ host: "0.0.0.0", allowNonLoopback: true });
  });

  it("does not mind the host while metrics are disabled", () => {
    const c = minimalConfig();
    c.metrics = { enabled: false, host: "0.0.0.0" };
    expect(() => parseConfig(c)).not.toThrow();
  });
});

describe("bus timeouts against the deadlines they serve", () => {
  it("refuses timeoutMs 60000 with defaultDeadlineMs 10", () => {
    const c = minimalConfig();
    c.buses.plc.timeoutMs = 60_000;
    c.commands = { defaultDeadlineMs: 10 };
    expect(problemsOf(c).find((p) => p.path === "buses.plc.timeoutMs")).toEqual({
      path: "buses.plc.timeoutMs",
      message:
        "timeoutMs 60000 and the 30000 ms of silence after a timeout exceed commands.defaultDeadlineMs (10): every command queued behind one unanswered request would miss its deadline; raise defaultDeadlineMs.",
    });
  });

  it("refuses a timeout that, with its silence, outlasts the default deadline, and names the largest that fits", () => {
    const c = minimalConfig();
    c.buses.line1.timeoutMs = 3000;
    c.commands = { defaultDeadlineMs: 4000 };
    expect(onlyProblem(c)).toMatchObject({
      path: "buses.line1.timeoutMs",
      message: expect.stringMatching(/defaultDeadlineMs \(4000\).*at most 2666/),
    });
  });

  it("takes a timeout whose silence still fits (3000 + 1500 within 5000)", () => {
    const c = minimalConfig();
    c.buses.line1.timeoutMs = 3000;
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("checks the default timeout (1000 ms) against a short default deadline", () => {
    const c = minimalConfig();
    c.commands = { defaultDeadlineMs: 1000 };
    expect(pathsOf(c)).toEqual(["buses.line1.timeoutMs", "buses.plc.timeoutMs"]);
  });
});

describe("the write function", () => {
  it("a plain actuator may write with FC06", () => {
    const c = minimalConfig();
    c.actuators[1].writeFunction = "fc06";
    expect(parseConfig(c).actuators[1]!.writeFunction).toBe("fc06");
  });

  it("a fenced actuator may not: its command block is one FC16", () => {
    const c = minimalConfig();
    c.actuators[0].writeFunction = "fc06";
    expect(onlyProblem(c).path).toBe("actuators[0].writeFunction");
  });

  it("only fc16 and fc06 exist", () => {
    const c = minimalConfig();
    c.actuators[1].writeFunction = "fc05";
    expect(onlyProblem(c).path).toBe("actuators[1].writeFunction");
  });
});
