import { describe, expect, it } from "vitest";
import {
  eventsTopic,
  gatewayStatusTopic,
  isActuatorId,
  isHolderId,
  isPublishableTopic,
  parseRequestTopic,
  replyTopic,
  requestSubscriptions,
  stateTopic,
} from "../../src/adapters/mqtt/topics.ts";

describe("parseRequestTopic", () => {
  it.each([
    ["fencegate/valve-1/lease/acquire", { actuator: "valve-1", verb: "lease/acquire" }],
    ["fencegate/valve-1/lease/renew", { actuator: "valve-1", verb: "lease/renew" }],
    ["fencegate/valve-1/lease/release", { actuator: "valve-1", verb: "lease/release" }],
    ["fencegate/valve-1/command", { actuator: "valve-1", verb: "command" }],
    ["fencegate/valve-1/read", { actuator: "valve-1", verb: "read" }],
    // Malformed actuator ids are still requests: parseRequest refuses them with INVALID_REQUEST.
    ["fencegate/Valve_1/command", { actuator: "Valve_1", verb: "command" }],
    ["fencegate//read", { actuator: "", verb: "read" }],
  ])("parses %s", (topic, expected) => {
    expect(parseRequestTopic("fencegate", topic)).toEqual(expected);
  });

  it.each([
    "fencegate/valve-1/lease/steal",
    "fencegate/valve-1/lease",
    "fencegate/valve-1/lease/acquire/x",
    "fencegate/valve-1/command/x",
    "fencegate/valve-1/state",
    "fencegate/valve-1/events",
    "fencegate/valve-1/reply/ctl-a",
    "fencegate/gateway/gw-1/status",
    "fencegate/command",
    "fencegate",
    "other/valve-1/command",
    "fencegatex/valve-1/command",
    "/fencegate/valve-1/command",
  ])("is not a request topic: %s", (topic) => {
    expect(parseRequestTopic("fencegate", topic)).toBeNull();
  });

  it("accepts a multi-level base topic", () => {
    expect(parseRequestTopic("site/a/fg", "site/a/fg/pump-2/lease/renew")).toEqual({ actuator: "pump-2", verb: "lease/renew" });
    expect(parseRequestTopic("site/a/fg", "site/b/fg/pump-2/lease/renew")).toBeNull();
  });
});

describe("topic builders", () => {
  it("builds the reply topic for a holder and for a read without holder", () => {
    expect(replyTopic("fencegate", "valve-1", "ctl-a")).toBe("fencegate/valve-1/reply/ctl-a");
    expect(replyTopic("fencegate", "valve-1", undefined)).toBe("fencegate/valve-1/reply/_");
  });

  it("builds the state, events and gateway status topics", () => {
    expect(stateTopic("fencegate", "valve-1")).toBe("fencegate/valve-1/state");
    expect(eventsTopic("fencegate", "valve-1")).toBe("fencegate/valve-1/events");
    expect(gatewayStatusTopic("fencegate", "gw-1")).toBe("fencegate/gateway/gw-1/status");
  });

  it("lists the request subscriptions", () => {
    expect(requestSubscriptions("fencegate")).toEqual(["fencegate/+/lease/+", "fencegate/+/command", "fencegate/+/read"]);
  });
});

describe("name rules", () => {
  it.each([
    ["valve-1", true],
    ["0", true],
    ["a_b-c", true],
    ["a".repeat(64), true],
    ["a".repeat(65), false],
    ["", false],
    ["-a", false],
    ["_a", false],
    ["A", false],
    ["a.b", false],
    ["a/b", false],
  ])("actuator id %j valid: %s", (id, ok) => {
    expect(isActuatorId(id)).toBe(ok);
  });

  it.each([
    ["ctl-a", true],
    ["Ctl.A:1_x-y", true],
    ["h".repeat(128), true],
    ["h".repeat(129), false],
    ["", false],
    ["a b", false],
    ["a/b", false],
    ["a+", false],
    ["é", false],
  ])("holder %j valid: %s", (h, ok) => {
    expect(isHolderId(h)).toBe(ok);
  });

  it.each([
    ["ctl/a/responses", true],
    ["a", true],
    ["é/ü", true],
    ["", false],
    ["a/+/b", false],
    ["a/#", false],
    ["a\u0000b", false],
    ["a\uD800b", false],
    ["x".repeat(65_536), false],
  ])("publishable topic %j: %s", (t, ok) => {
    expect(isPublishableTopic(t)).toBe(ok);
  });
});
