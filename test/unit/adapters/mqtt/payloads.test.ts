import { describe, expect, it } from "vitest";
import {
  eventPayload,
  gatewayStatusPayload,
  readReplyPayload,
  refusalPayload,
  replyPayload,
  statePayload,
} from "../../../../src/adapters/mqtt/payloads.ts";
import type { StateView } from "../../../../src/shell/ports.ts";
import type { Reply } from "../../../../src/core/types.ts";

const AT = new Date("2026-11-29T10:00:00.123Z");
const STATE: StateView = {
  actuator: "valve-1",
  online: true,
  lease: { holder: "ctl-a", token: 7, expiresInMs: 4200 },
  fence: { token: 7, seq: 3 },
  points: { valve: 42.5, mode: 1 },
  pointsAgeMs: 120,
  gateway: "gw-1",
  safeWrite: null,
  pointFaults: {},
  problem: null,
  at: AT,
};

describe("replies", () => {
  it.each<[string, Reply, string]>([
    [
      "lease granted",
      { ok: true, lease: { holder: "ctl-a", token: 7, ttlMs: 5000 } },
      '{"id":"r-1","ok":true,"lease":{"holder":"ctl-a","token":7,"ttlMs":5000}}',
    ],
    ["lease released", { ok: true, lease: null }, '{"id":"r-1","ok":true,"lease":null}'],
    [
      "command applied",
      { ok: true, outcome: "applied", token: 7, seq: 3, applied: { valve: 42.5 } },
      '{"id":"r-1","ok":true,"outcome":"applied","token":7,"seq":3,"applied":{"valve":42.5}}',
    ],
    [
      "fence refusal with lease",
      {
        ok: false,
        error: {
          code: "STALE_TOKEN",
          message: "token 6 is below the fence token 7",
          fence: { token: 7, seq: null },
          lease: { holder: "ctl-b", token: 7, expiresInMs: 900 },
        },
      },
      '{"id":"r-1","ok":false,"error":{"code":"STALE_TOKEN","message":"token 6 is below the fence token 7","fence":{"token":7,"seq":null},"lease":{"holder":"ctl-b","token":7,"expiresInMs":900}}}',
    ],
    [
      "duplicate with original",
      {
        ok: false,
        error: {
          code: "DUPLICATE",
          message: "(7, 3) was already accepted",
          original: { ok: true, outcome: "applied", token: 7, seq: 3, applied: { v: 1 } },
        },
      },
      '{"id":"r-1","ok":false,"error":{"code":"DUPLICATE","message":"(7, 3) was already accepted","original":{"ok":true,"outcome":"applied","token":7,"seq":3,"applied":{"v":1}}}}',
    ],
    [
      "device error",
      { ok: false, error: { code: "DEVICE_ERROR", message: "the device answered with exception 2", modbusCode: 2 } },
      '{"id":"r-1","ok":false,"error":{"code":"DEVICE_ERROR","message":"the device answered with exception 2","modbusCode":2}}',
    ],
  ])("%s: id first, exact shape", (_label, reply, json) => {
    expect(replyPayload("r-1", reply)).toBe(json);
  });

  it("an id with quotes and backslashes is escaped", () => {
    expect(JSON.parse(replyPayload('a"b\\c', { ok: true, lease: null })).id).toBe('a"b\\c');
  });

  it("read reply carries the state object", () => {
    expect(JSON.parse(readReplyPayload("r-9", STATE))).toEqual({ id: "r-9", ok: true, state: JSON.parse(statePayload(STATE)) });
    expect(readReplyPayload("r-9", STATE).startsWith('{"id":"r-9","ok":true,"state":{')).toBe(true);
  });

  it("a refusal from parseRequest becomes an error reply", () => {
    expect(
      refusalPayload({
        kind: "refused",
        code: "RETAINED_REQUEST",
        id: "r-1",
        message: "retained",
        route: { kind: "holderTopic", holderTopic: "x" },
      }),
    ).toBe('{"id":"r-1","ok":false,"error":{"code":"RETAINED_REQUEST","message":"retained"}}');
  });
});

describe("state", () => {
  it("has the contract's shape and key order, points sorted, the extensions after them", () => {
    expect(statePayload(STATE)).toBe(
      '{"actuator":"valve-1","online":true,"lease":{"holder":"ctl-a","token":7,"expiresInMs":4200},"fence":{"token":7,"seq":3},"points":{"mode":1,"valve":42.5},"at":"2026-11-29T10:00:00.123Z","pointsAgeMs":120,"gateway":"gw-1","safeWrite":null}',
    );
  });

  it("shows an owed safe write: its token, the attempts so far and the values", () => {
    const owed = { ...STATE, lease: null, fence: { token: 8, seq: 2 }, safeWrite: { token: 8, attempts: 3, set: { valve: 0 } } };
    expect(JSON.parse(statePayload(owed)).safeWrite).toEqual({ token: 8, attempts: 3, set: { valve: 0 } });
  });

  it("lease null and fence.seq null while the new lease has not commanded", () => {
    expect(
      JSON.parse(statePayload({ ...STATE, online: false, lease: null, fence: { token: 8, seq: null }, points: {}, pointsAgeMs: null })),
    ).toEqual({
      actuator: "valve-1",
      online: false,
      lease: null,
      fence: { token: 8, seq: null },
      points: {},
      at: "2026-11-29T10:00:00.123Z",
      pointsAgeMs: null,
      gateway: "gw-1",
      safeWrite: null,
    });
  });

  it("names point faults and the problem (extensions) only when there are some, after the contract's fields", () => {
    const payload = statePayload({
      ...STATE,
      online: false,
      points: { mode: 1 },
      pointFaults: { valve: "reads NaN, not a finite number" },
      problem: "Unit 1 does not answer.",
    });
    expect(payload).toBe(
      '{"actuator":"valve-1","online":false,"lease":{"holder":"ctl-a","token":7,"expiresInMs":4200},"fence":{"token":7,"seq":3},"points":{"mode":1},"at":"2026-11-29T10:00:00.123Z","pointsAgeMs":120,"gateway":"gw-1","safeWrite":null,"pointFaults":{"valve":"reads NaN, not a finite number"},"problem":"Unit 1 does not answer."}',
    );
    expect(Object.values(JSON.parse(payload).points)).not.toContain(null); // no point is ever published as null
  });

  it("carries no extra fields from the view", () => {
    const view = { ...STATE, lease: { holder: "h", token: 1, expiresInMs: 5, ttlMs: 9, expiresAtMs: 99 } };
    expect(Object.keys(JSON.parse(statePayload(view)).lease)).toEqual(["holder", "token", "expiresInMs"]);
  });
});

describe("events", () => {
  it.each([
    [{ type: "granted", holder: "ctl-a", token: 7 }, '{"type":"granted","at":"2026-11-29T10:00:00.123Z","holder":"ctl-a","token":7}'],
    [
      { type: "rejected", holder: "ctl-a", token: 6, seq: 2, code: "STALE_TOKEN" },
      '{"type":"rejected","at":"2026-11-29T10:00:00.123Z","holder":"ctl-a","token":6,"seq":2,"code":"STALE_TOKEN"}',
    ],
    [{ type: "expired", token: 7 }, '{"type":"expired","at":"2026-11-29T10:00:00.123Z","token":7}'],
    [
      { type: "expired", holder: "ctl-a", token: 7, reason: "restart" },
      '{"type":"expired","at":"2026-11-29T10:00:00.123Z","holder":"ctl-a","token":7,"reason":"restart"}',
    ],
    [{ type: "outcome-unknown", seq: 0 }, '{"type":"outcome-unknown","at":"2026-11-29T10:00:00.123Z","seq":0}'],
  ] as const)("%j", (event, json) => {
    expect(eventPayload(event, AT)).toBe(json);
  });
});

describe("gateway status", () => {
  it("is online or offline", () => {
    expect(gatewayStatusPayload(true)).toBe("online");
    expect(gatewayStatusPayload(false)).toBe("offline");
  });
});
