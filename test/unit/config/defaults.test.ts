import { describe, expect, it } from "vitest";
import { actuatorCoreConfig } from "../../../src/config/core.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { minimalConfig } from "../../support/config-fixture.ts";

describe("defaults", () => {
  it("every optional section and setting takes its documented default", () => {
    const config = parseConfig(minimalConfig());
    expect(config.mqtt).toEqual({
      url: "mqtt://127.0.0.1:1883",
      clientId: "fencegate-gw1",
      protocolVersion: 5,
      baseTopic: "fencegate",
      allowCleartextCredentials: false,
      keepaliveS: 30,
      reconnect: { minMs: 1000, maxMs: 30_000 },
      maxPayloadBytes: 16_384,
      requestBudget: { perRequesterPerS: 50, perRequesterBurst: 100, perActuatorPerS: 500, perActuatorBurst: 1000 },
    });
    expect(config.buses.line1).toEqual({
      type: "rtu",
      path: "/dev/ttyUSB0",
      baudRate: 19_200,
      parity: "even",
      stopBits: 1,
      dataBits: 8,
      timeoutMs: 1000,
      reconnect: { minMs: 500, maxMs: 30_000 },
    });
    expect(config.buses.plc).toEqual({
      type: "tcp",
      host: "10.0.0.5",
      port: 502,
      timeoutMs: 1000,
      reconnect: { minMs: 500, maxMs: 30_000 },
    });
    expect(config.leases).toEqual({ minTtlMs: 1000, maxTtlMs: 300_000, defaultTtlMs: 10_000 });
    expect(config.commands).toEqual({
      defaultDeadlineMs: 5000,
      maxDeadlineMs: 60_000,
      safeWriteRetry: { minMs: 250, maxMs: 10_000 },
      queueLimit: 16,
      recentLimit: 64,
    });
    expect(config.journal).toEqual({
      path: "/var/lib/fencegate/journal.db",
      createIfMissing: false,
      gatherMaxMs: 2,
      auditLagMs: 200,
      auditLagRecords: 256,
      auditQueueLimit: 8192,
      commitStallMs: 10_000,
    });
    expect(config.logging).toEqual({ level: "info" });
    expect(config.metrics).toEqual({
      enabled: true,
      host: "127.0.0.1",
      port: 9464,
      statusPage: { enabled: true, maxEventStreams: 16 },
      allowNonLoopback: false,
      hostNames: [],
    });
    expect(config.shutdown).toEqual({ drainTimeoutMs: 5000 });
  });

  it("an actuator defaults to a 1 s poll, hold on expiry, no authenticated commands and FC16 writes", () => {
    const damper = parseConfig(minimalConfig()).actuators[1]!;
    expect(damper).toMatchObject({ pollIntervalMs: 1000, expiry: { policy: "hold" }, authenticatedCommands: false, writeFunction: "fc16" });
  });

  it("a point defaults to a read-only u16 holding register, scale 1, limits its type can hold", () => {
    const c = minimalConfig();
    c.actuators[0].points.fault = { register: 103 };
    c.actuators[0].points.temperature = { register: 104, type: "i16", scale: 0.1 };
    const points = parseConfig(c).actuators[0]!.points;
    expect(points.fault).toEqual({
      register: 103,
      table: "holding",
      type: "u16",
      wordOrder: "big",
      scale: 1,
      writable: false,
      min: 0,
      max: 65_535,
    });
    expect(points.temperature).toMatchObject({ min: -3276.8, max: 3276.7 });
  });

  it("an explicit clientId is kept", () => {
    const c = minimalConfig();
    c.mqtt.clientId = "gw-a";
    expect(parseConfig(c).mqtt.clientId).toBe("gw-a");
  });
});

describe("actuatorCoreConfig", () => {
  it("maps points, a safe expiry policy and the limits for the core", () => {
    const c = minimalConfig();
    c.leases = { minTtlMs: 500, maxTtlMs: 60_000 };
    c.commands = { queueLimit: 8, recentLimit: 32, safeWriteRetry: { minMs: 100, maxMs: 2500 } };
    expect(actuatorCoreConfig(parseConfig(c), "valve-1")).toEqual({
      points: {
        position: { writable: true, min: 0, max: 100 },
        actual: { writable: false, min: 0, max: 100 },
      },
      expiryPolicy: { kind: "safe", set: { position: 0 } },
      limits: { minTtlMs: 500, maxTtlMs: 60_000, queueLimit: 8, recentLimit: 32, safeRetryMinMs: 100, safeRetryMaxMs: 2500 },
    });
  });

  it("still loads a file with the obsolete safeWriteDeadlineMs, which no longer limits the safe write", () => {
    const c = minimalConfig();
    c.commands = { safeWriteDeadlineMs: 5000 };
    expect(actuatorCoreConfig(parseConfig(c), "valve-1").limits).toMatchObject({ safeRetryMinMs: 250, safeRetryMaxMs: 10_000 });
  });

  it("maps a hold policy", () => {
    expect(actuatorCoreConfig(parseConfig(minimalConfig()), "damper-1").expiryPolicy).toEqual({ kind: "hold" });
  });

  it("throws on an actuator the configuration does not define", () => {
    expect(() => actuatorCoreConfig(parseConfig(minimalConfig()), "nope")).toThrow(RangeError);
  });
});
