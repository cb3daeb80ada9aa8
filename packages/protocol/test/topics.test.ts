import { describe, expect, it } from "vitest";
import {
  eventsTopic,
  gatewayStatusTopic,
  isActuatorId,
  isHolderId,
  MAX_RESPONSE_TOPIC_BYTES,
  MAX_RESPONSE_TOPIC_LEVELS,
  parseRequestTopic,
  replyTopic,
  requestSubscriptions,
  actuatorRequestSubscriptions,
  gatewayActuatorsTopic,
  responseTopicProblem,
  stateTopic,
  topicMatches,
} from "../src/topics.ts";

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

  it("lists the request topics of any gateway", () => {
    expect(requestSubscriptions("fencegate")).toEqual(["fencegate/+/lease/+", "fencegate/+/command", "fencegate/+/read"]);
  });

  it("a gateway subscribes to its own actuators' request topics only, and announces them on its actuators topic", () => {
    expect(actuatorRequestSubscriptions("site/fg", ["valve-1", "pump-2"])).toEqual([
      "site/fg/valve-1/lease/+",
      "site/fg/valve-1/command",
      "site/fg/valve-1/read",
      "site/fg/pump-2/lease/+",
      "site/fg/pump-2/command",
      "site/fg/pump-2/read",
    ]);
    const filters = actuatorRequestSubscriptions("fencegate", ["valve-1"]);
    expect(filters.some((f) => topicMatches(f, "fencegate/valve-2/command"))).toBe(false);
    expect(filters.some((f) => topicMatches(f, "fencegate/valve-1/lease/renew"))).toBe(true);
    expect(gatewayActuatorsTopic("fencegate", "gw-1")).toBe("fencegate/gateway/gw-1/actuators");
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
});

describe("responseTopicProblem", () => {
  const levels = (n: number) => Array.from({ length: n }, (_, i) => `l${i}`).join("/");
  const bytes = (n: number) => `r/${"x".repeat(n - 2)}`;

  it.each([
    ["ctl/a/responses"],
    ["a"],
    ["é/ü"],
    ["emoji/\u{1F600}"],
    [`${MAX_RESPONSE_TOPIC_LEVELS} levels, the limit`, levels(MAX_RESPONSE_TOPIC_LEVELS)],
    [`${MAX_RESPONSE_TOPIC_BYTES} bytes, the limit`, bytes(MAX_RESPONSE_TOPIC_BYTES)],
    ["the client library's", "fencegate/_client/ctl-a/5c6e0c1e-9a0e-4e63-9c87-3f0bdbf2a0b5"],
    ["a reply topic", "fencegate/valve-1/reply/ctl-a"],
    ["a reply topic, deeper", "fencegate/valve-1/reply/ctl-a/x"],
    ["another base", "other/valve-1/state"],
    ["the base itself", "fencegate"],
  ])("accepts %s", (...args: string[]) => {
    expect(responseTopicProblem("fencegate", args[args.length - 1]!)).toBeNull();
  });

  it.each([
    ["empty", "", "empty"],
    [`${MAX_RESPONSE_TOPIC_LEVELS + 1} levels`, levels(MAX_RESPONSE_TOPIC_LEVELS + 1), `${MAX_RESPONSE_TOPIC_LEVELS + 1} levels`],
    ["202 levels (Mosquitto disconnects its publisher)", `${"x/".repeat(201)}y`, "202 levels"],
    [`${MAX_RESPONSE_TOPIC_BYTES + 1} bytes`, bytes(MAX_RESPONSE_TOPIC_BYTES + 1), `${MAX_RESPONSE_TOPIC_BYTES + 1} bytes`],
    ["multi-byte characters past the byte limit", `r/${"é".repeat(MAX_RESPONSE_TOPIC_BYTES / 2)}`, "bytes"],
    ["+", "ctl/+/responses", "wildcard"],
    ["#", "ctl/#", "wildcard"],
    ["NUL", "a\u0000b", "U+0000"],
    ["a C0 control", "a\u001fb", "U+001F"],
    ["a newline", "a\nb", "U+000A"],
    ["DEL", "a\u007fb", "U+007F"],
    ["a C1 control", "a\u0085b", "U+0085"],
    ["a non-character", "a\ufdd0b", "U+FDD0"],
    ["U+FFFE", "a\ufffeb", "U+FFFE"],
    ["U+1FFFF", "a\u{1ffff}b", "U+1FFFF"],
    ["a lone high surrogate", "a\ud800b", "U+D800"],
    ["a lone low surrogate", "a\udc00", "U+DC00"],
    ["$SYS", "$SYS/broker/x", "'$'"],
    ["$CONTROL", "$CONTROL/dynamic-security/v1", "'$'"],
    ["another actuator's command topic", "fencegate/valve-2/command", "gateway's own topics"],
    ["a lease topic", "fencegate/valve-2/lease/release", "gateway's own topics"],
    ["a read topic", "fencegate/valve-1/read", "gateway's own topics"],
    ["a state topic", "fencegate/valve-2/state", "gateway's own topics"],
    ["an events topic", "fencegate/valve-2/events", "gateway's own topics"],
    ["the gateway status topic", "fencegate/gateway/gw-1/status", "gateway's own topics"],
    ["anything under B/gateway", "fencegate/gateway/x", "gateway's own topics"],
  ])("refuses %s", (_label, topic, names) => {
    expect(responseTopicProblem("fencegate", topic)).toContain(names);
  });

  it("knows the gateway's topics under a base of several levels", () => {
    expect(responseTopicProblem("site/fencegate", "site/fencegate/valve-1/state")).toContain("gateway's own topics");
    expect(responseTopicProblem("site/fencegate", "site/other/valve-1/state")).toBeNull();
  });
});

describe("topicMatches", () => {
  it.each([
    ["a/+/c", "a/b/c", true],
    ["a/+/c", "a/b/d", false],
    ["a/+/c", "a/b/c/d", false],
    ["a/+", "a", false],
    ["a/#", "a/b/c", true],
    ["a/#", "a", true], // a filter ending in # also matches its parent (MQTT 5 §4.7.1.2)
    ["a/b", "a/b", true],
    ["a/+/+", "a//", true],
  ])("%s matches %s: %s", (filter, topic, ok) => {
    expect(topicMatches(filter, topic)).toBe(ok);
  });
});
