import { describe, expect, it } from "vitest";
import { parseRequest } from "../../../../src/adapters/mqtt/requests.ts";
import { MALFORMED_BASE, MALFORMED_LIMITS, malformedRequests, type MalformedCase } from "./malformed.ts";

const cases = malformedRequests();

function run(c: MalformedCase) {
  return parseRequest({
    base: MALFORMED_BASE,
    actuator: c.actuator,
    verb: c.topicVerb,
    payload: c.payload,
    retain: c.retain,
    responseTopic: c.responseTopic,
    correlationData: c.correlationData,
    limits: MALFORMED_LIMITS,
  });
}

describe("the malformed-request corpus", () => {
  it("has at least 200 cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(200);
  });

  it("has distinct names and distinct requests", () => {
    expect(new Set(cases.map((c) => c.name)).size).toBe(cases.length);
    const keys = cases.map((c) =>
      JSON.stringify([c.actuator, c.topicVerb, c.payload.toString("base64"), c.retain, c.responseTopic ?? null]),
    );
    expect(new Set(keys).size).toBe(cases.length);
  });

  it("covers both outcomes and both refusal codes", () => {
    const kinds = new Set(cases.map((c) => (c.expect.kind === "refused" ? c.expect.code : c.expect.kind)));
    expect([...kinds].sort()).toEqual(["INVALID_REQUEST", "RETAINED_REQUEST", "unanswerable"]);
  });
});

describe("each malformed request gets its exact outcome", () => {
  it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
    const r = run(c);
    if (c.expect.kind === "unanswerable") {
      expect(r).toMatchObject({ kind: "unanswerable", cause: c.expect.cause });
      return;
    }
    expect(r.kind).toBe("refused");
    if (r.kind !== "refused") return;
    expect(r.code).toBe(c.expect.code);
    expect(r.id).toBe(c.expect.id);
    expect(r.message).toContain(c.expect.names);
    expect(r.message).not.toMatch(/[\n\r]/);
    const replyTo = c.expect.replyTo;
    if (replyTo.kind === "responseTopic") {
      expect(r.route).toEqual({
        kind: "responseTopic",
        responseTopic: replyTo.topic,
        ...(c.correlationData ? { correlationData: c.correlationData } : {}),
      });
    } else {
      expect(r.route).toEqual({ kind: "holderTopic", holderTopic: `${MALFORMED_BASE}/${replyTo.suffix}` });
    }
  });
});
