/**
 * Every error code of the MQTT API v1 (docs/mqtt-api.md, "Error codes"),
 * produced end to end: a real MQTT client, real Mosquitto, the real daemon process and
 * the simulated fenced actuator over Modbus TCP. For each code: the exact code, a message
 * of one sentence naming the field or condition, the extra fields the contract gives it,
 * and, where the contract says "effect on device: none", that the device did not change.
 * Then the two reply routes (v5 response topic, 3.1.1 fallback topics).
 *
 * Actuators: valve-1 (unit 1, polled) for the lease and fence codes; valve-2 (unit 2, not
 * polled, so a test knows which transaction an injected fault hits) for the queue and
 * device codes; valve-max (unit 3, its fence pre-seeded at 2^53-1) for TOKENS_EXHAUSTED.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { FencegateClient, FencegateError } from "fencegate-client";
import ModbusSerial from "modbus-serial";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FENCED, MAX_TOKEN, encodeCommandBlock } from "../../../packages/protocol/src/modbus-profile.ts";
import type { DeviceSnapshot as Device } from "../../../firmware-bridge/src/device.ts";
import type { SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { valve, type DaemonProcess } from "../../support/daemon.ts";
import { Teardown, daemonReport, startStack } from "../../support/stack.ts";
import { TopicWatcher, safeJson } from "../../support/watch.ts";

const ModbusRTU = ModbusSerial.default;

const BASE = "fencegate";
/** Never polled on its own: every transaction to units 2 and 3 is one a test caused. */
const NO_POLL = { pollIntervalMs: 3_600_000 };
const BUS_TIMEOUT_MS = 500;
const SLOW_DEVICE_MS = 200;

const teardown = new Teardown();
let sim: SimulatorHandle;
let daemon: DaemonProcess;
let brokerUrl: string;
let a: TestController;
let b: TestController;
let events: TopicWatcher;

beforeAll(async () => {
  const stack = await startStack(teardown, {
    name: "error-codes",
    sim: (dir) => {
      // Unit 3's EEPROM holds the highest token there is: no higher one can ever be granted.
      const stateFile = join(dir, "sim-state.json");
      const block = encodeCommandBlock({ token: MAX_TOKEN, seq: 0, setpoints: { position: 0 } });
      writeFileSync(stateFile, JSON.stringify({ version: 1, units: { "3": { token: String(MAX_TOKEN), seq: 0, block, target: 0 } } }));
      return { units: [1, 2, 3], rate: 0, stateFile };
    },
    gateway: ({ host, port }) => ({
      buses: { sim: { type: "tcp", host, port, timeoutMs: BUS_TIMEOUT_MS } },
      actuators: [
        valve("valve-1", "sim", 1),
        valve("valve-2", "sim", 2, "fenced", NO_POLL),
        valve("valve-max", "sim", 3, "fenced", NO_POLL),
      ],
      commands: { queueLimit: 1 },
    }),
    fenced: ["valve-1", "valve-2", "valve-max"],
  });
  ({ sim, daemon } = stack);
  brokerUrl = stack.broker.url;
  a = teardown.add(await TestController.connect(brokerUrl, "ctl-a"), (c) => c.close());
  b = teardown.add(await TestController.connect(brokerUrl, "ctl-b"), (c) => c.close());
  events = teardown.add(await TopicWatcher.connect(brokerUrl, [`${BASE}/+/events`]), (w) => w.close());
});

afterAll(() => teardown.run());

// ---------------------------------------------------------------------------------------
// Helpers

const held: { ctl: TestController; actuator: string; token: number }[] = [];

/** Acquires a lease (released after the test) and returns its token. */
async function lease(ctl: TestController, actuator: string, ttlMs = 10_000): Promise<number> {
  const reply = await ctl.acquire(actuator, ttlMs);
  expect(reply).toMatchObject({ ok: true, lease: { holder: ctl.holder, ttlMs } });
  const token = reply.lease.token as number;
  held.push({ ctl, actuator, token });
  return token;
}

beforeEach(({ onTestFailed }) => onTestFailed(() => console.error(daemonReport(daemon))));

afterEach(async () => {
  sim?.clearFaults();
  for (const { ctl, actuator, token } of held.splice(0)) {
    await ctl.request(actuator, "lease/release", { holder: ctl.holder, token }).catch(() => undefined);
  }
});

/**
 * The reply's error, after checking it is a refusal with `code` whose message is one
 * sentence (one line, nothing after a sentence end) naming `names`.
 */
function refusal(reply: Json, code: string, names: RegExp): Json {
  expect(reply.ok, JSON.stringify(reply)).toBe(false);
  expect(reply.error.code, JSON.stringify(reply.error)).toBe(code);
  const message = reply.error.message;
  expect(typeof message).toBe("string");
  expect(message.trim().length).toBeGreaterThan(0);
  expect(message, "one line").not.toMatch(/[\r\n]/);
  expect(message, "one sentence").not.toMatch(/[.!?]\s+\S/);
  expect(message).toMatch(names);
  return reply.error;
}

/**
 * The device's state now, after one `read` of the actuator: its poll queues behind any
 * transaction the gateway started before it, so a write the gateway wrongly sent has
 * reached the simulator by the time this returns.
 */
async function deviceAfterFlush(actuator: string, unit: number): Promise<Device> {
  await gatewayState(actuator);
  return sim.device(unit);
}

/** "Effect on device: none": nothing applied, fence and target unchanged. */
function expectUntouched(before: Device, after: Device): void {
  expect(after.applied.length).toBe(before.applied.length);
  expect(after.fence).toEqual(before.fence);
  expect(after.targetPosition).toBe(before.targetPosition);
}

/** Positions the device applied since `before`. */
function appliedSince(before: Device, after: Device): number[] {
  return after.applied.slice(before.applied.length).map((c) => c.setpoints.position);
}

async function gatewayState(actuator: string): Promise<Json> {
  const read = await a.read(actuator);
  expect(read.ok).toBe(true);
  return read.state;
}

function without<T extends Json>(o: T, key: string): Json {
  const { [key]: _dropped, ...rest } = o;
  return rest;
}

// ---------------------------------------------------------------------------------------
// Request and point checks

describe("INVALID_REQUEST", () => {
  it("is returned for a ttlMs below the configured minimum, naming ttlMs, and grants nothing", async () => {
    const before = sim.device(1);
    const error = refusal(await a.request("valve-1", "lease/acquire", { holder: "ctl-a", ttlMs: 50 }), "INVALID_REQUEST", /ttlMs/);
    expect(error.message).toMatch(/100/); // the configured bound
    expect(await gatewayState("valve-1")).toMatchObject({ lease: null });
    expectUntouched(before, await deviceAfterFlush("valve-1", 1));
  });
});

describe("RETAINED_REQUEST", () => {
  it("is returned for an otherwise valid acquire published retained, and grants nothing", async () => {
    const before = sim.device(1);
    const topic = `${BASE}/valve-1/lease/acquire`;
    try {
      const reply = await a.request("valve-1", "lease/acquire", { holder: "ctl-a", ttlMs: 5000 }, { retain: true });
      refusal(reply, "RETAINED_REQUEST", /retain/);
    } finally {
      await a.client.publishAsync(topic, "", { qos: 1, retain: true }); // clear it from the broker
    }
    expect(await gatewayState("valve-1")).toMatchObject({ lease: null });
    expectUntouched(before, await deviceAfterFlush("valve-1", 1));
  });
});

describe("UNKNOWN_ACTUATOR", () => {
  it("is said by the client library for a well-formed actuator id no gateway announces, naming it; the gateway never hears the request", async () => {
    const before = sim.device(1);
    const client = await FencegateClient.connect({ url: brokerUrl, holder: "ctl-u" });
    try {
      const err = await client.acquire("valve-9", { ttlMs: 5000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FencegateError);
      const { code, message } = err as FencegateError;
      refusal({ ok: false, error: { code, message: message.replace(/^[A-Z_]+: /, "") } }, "UNKNOWN_ACTUATOR", /valve-9/);
    } finally {
      await client.close();
    }
    expectUntouched(before, await deviceAfterFlush("valve-1", 1));
  });
});

describe("UNKNOWN_POINT, READ_ONLY_POINT, OUT_OF_RANGE", () => {
  it("are returned naming the point, and leave the fence where it was", async () => {
    const n = await lease(a, "valve-1");
    const before = sim.device(1);
    refusal(await a.command("valve-1", n, 0, { nozzle: 1 }), "UNKNOWN_POINT", /nozzle/);
    refusal(await a.command("valve-1", n, 0, { actual: 5 }), "READ_ONLY_POINT", /actual/);
    const range = refusal(await a.command("valve-1", n, 0, { position: 150 }), "OUT_OF_RANGE", /position/);
    expect(range.message).toMatch(/150/);
    expectUntouched(before, await deviceAfterFlush("valve-1", 1));
    expect(await gatewayState("valve-1")).toMatchObject({ fence: { token: n, seq: null } });
    // Nothing was accepted: the lease's first seq is still free.
    expect(await a.command("valve-1", n, 0, { position: 12 })).toMatchObject({ ok: true, outcome: "applied", token: n, seq: 0 });
  });
});

// ---------------------------------------------------------------------------------------
// Lease and fence codes

/**
 * A fence-related refusal on valve-1: `send` is refused with `code` (see {@link refusal}),
 * the error carries `fence` and, exactly when a lease is live, `lease`; the device is untouched.
 */
async function fenceRefusal(
  send: () => Promise<Json>,
  code: string,
  names: RegExp,
  expected: { fence: Json; lease?: Json },
): Promise<Json> {
  const before = sim.device(1);
  const error = refusal(await send(), code, names);
  expect(error.fence).toEqual(expected.fence);
  if (expected.lease) expect(error.lease).toMatchObject(expected.lease);
  else expect(error.lease).toBeUndefined();
  expectUntouched(before, await deviceAfterFlush("valve-1", 1));
  return error;
}

describe("LEASE_HELD", () => {
  it("tells who holds the lease, its token and expiresInMs, and the fence", async () => {
    const n = await lease(a, "valve-1", 10_000);
    const error = await fenceRefusal(() => b.acquire("valve-1", 5000), "LEASE_HELD", /ctl-a/, {
      fence: { token: n, seq: null },
      lease: { holder: "ctl-a", token: n },
    });
    expect(error.lease.expiresInMs).toBeGreaterThan(0);
    expect(error.lease.expiresInMs).toBeLessThanOrEqual(10_000);
    expect(await gatewayState("valve-1")).toMatchObject({ lease: { holder: "ctl-a", token: n } });
  });
});

describe("NOT_HOLDER", () => {
  it("is returned for a command with another holder's live token, with fence and lease", async () => {
    const n = await lease(a, "valve-1");
    await fenceRefusal(() => b.command("valve-1", n, 0, { position: 77 }), "NOT_HOLDER", /ctl-a/, {
      fence: { token: n, seq: null },
      lease: { holder: "ctl-a", token: n },
    });
  });
});

describe("LEASE_EXPIRED", () => {
  it("is returned for the newest token once its lease has run out, with the fence and no lease", async () => {
    const from = events.mark();
    const n = await lease(a, "valve-1", 100);
    await events.waitForJson(`${BASE}/valve-1/events`, (e) => e.type === "expired" && e.token === n, { from, what: "the expiry event" });
    await fenceRefusal(() => a.command("valve-1", n, 0, { position: 33 }), "LEASE_EXPIRED", new RegExp(`\\b${n}\\b`), {
      fence: { token: n, seq: null },
    });
  });
});

describe("STALE_TOKEN", () => {
  it("is returned for a token below the fence after a takeover, with the new fence and lease", async () => {
    const n = await lease(a, "valve-1");
    expect(await a.request("valve-1", "lease/release", { holder: "ctl-a", token: n })).toMatchObject({ ok: true, lease: null });
    const m = await lease(b, "valve-1");
    expect(m).toBeGreaterThan(n);
    await fenceRefusal(() => a.command("valve-1", n, 0, { position: 66 }), "STALE_TOKEN", new RegExp(`\\b${n}\\b`), {
      fence: { token: m, seq: null },
      lease: { holder: "ctl-b", token: m },
    });
  });
});

describe("UNKNOWN_TOKEN", () => {
  it("is returned for a token above any granted, with fence and lease", async () => {
    const n = await lease(a, "valve-1");
    await fenceRefusal(() => a.command("valve-1", n + 1000, 0, { position: 21 }), "UNKNOWN_TOKEN", new RegExp(`\\b${n + 1000}\\b`), {
      fence: { token: n, seq: null },
      lease: { holder: "ctl-a", token: n },
    });
  });
});

describe("STALE_SEQ", () => {
  it("is returned for a seq not above the fence's, with fence and lease", async () => {
    const n = await lease(a, "valve-1");
    expect(await a.command("valve-1", n, 5, { position: 25 })).toMatchObject({ ok: true, outcome: "applied", seq: 5 });
    await fenceRefusal(() => a.command("valve-1", n, 3, { position: 26 }), "STALE_SEQ", /seq/, {
      fence: { token: n, seq: 5 },
      lease: { holder: "ctl-a", token: n },
    });
  });
});

describe("DUPLICATE", () => {
  it("answers a retry of an applied command with its original outcome, without a second write", async () => {
    const n = await lease(a, "valve-1");
    const applied = await a.command("valve-1", n, 0, { position: 41 });
    expect(applied).toMatchObject({ ok: true, outcome: "applied", token: n, seq: 0, applied: { position: 41 } });
    expect((await deviceAfterFlush("valve-1", 1)).targetPosition).toBe(41);
    const retry = () => a.command("valve-1", n, 0, { position: 41 });

    const error = await fenceRefusal(retry, "DUPLICATE", /original/, { fence: { token: n, seq: 0 }, lease: { holder: "ctl-a", token: n } });
    expect(error.original).toEqual(without(applied, "id"));
    // Whatever the lease's state now: after release the retry still gets its original outcome.
    expect(await a.request("valve-1", "lease/release", { holder: "ctl-a", token: n })).toMatchObject({ ok: true });
    const later = await fenceRefusal(retry, "DUPLICATE", /original/, { fence: { token: n, seq: 0 } });
    expect(later.original).toEqual(without(applied, "id"));
  });
});

// ---------------------------------------------------------------------------------------
// Queue and device codes (valve-2: only the transactions a test causes)

/**
 * A lease of ctl-a on valve-2 and the device's state, with nothing of the gateway's at the
 * device: the read's poll queues behind any transaction still pending, so the next one to
 * unit 2 is the one the test causes.
 */
async function valve2Lease(): Promise<{ n: number; before: Device }> {
  await a.read("valve-2");
  const n = await lease(a, "valve-2");
  return { n, before: sim.device(2) };
}

describe("DEADLINE_EXCEEDED", () => {
  it("is returned for a command whose deadline passes while it waits behind another, which never reaches the device", async () => {
    const { n, before } = await valve2Lease();
    sim.setDelay(SLOW_DEVICE_MS, 2);
    const first = a.command("valve-2", n, 0, { position: 10 });
    const late = a.command("valve-2", n, 1, { position: 20 }, { deadlineMs: 20 });
    const error = refusal(await late, "DEADLINE_EXCEEDED", /deadline/);
    expect(error.fence).toEqual({ token: n, seq: 0 });
    expect(error.lease).toMatchObject({ holder: "ctl-a", token: n });
    expect(await first).toMatchObject({ ok: true, outcome: "applied", seq: 0 });
    sim.setDelay(0, 2);
    // Never accepted: its seq is still free, and the device saw only the others.
    expect(await a.command("valve-2", n, 1, { position: 30 })).toMatchObject({ ok: true, outcome: "applied", seq: 1 });
    expect(appliedSince(before, await deviceAfterFlush("valve-2", 2))).toEqual([10, 30]);
  });
});

describe("OVERLOADED", () => {
  it("is returned when the actuator's queue (queueLimit 1) is full, and the refused command never reaches the device", async () => {
    const { n, before } = await valve2Lease();
    sim.setDelay(SLOW_DEVICE_MS, 2);
    const atDevice = a.command("valve-2", n, 0, { position: 11 });
    const queued = a.command("valve-2", n, 1, { position: 12 });
    const error = refusal(await a.command("valve-2", n, 2, { position: 13 }), "OVERLOADED", /queue/);
    expect(error.fence).toEqual({ token: n, seq: 0 });
    expect(await atDevice).toMatchObject({ ok: true, outcome: "applied", seq: 0 });
    expect(await queued).toMatchObject({ ok: true, outcome: "applied", seq: 1 });
    sim.setDelay(0, 2);
    expect(await a.command("valve-2", n, 2, { position: 14 })).toMatchObject({ ok: true, outcome: "applied", seq: 2 });
    expect(appliedSince(before, await deviceAfterFlush("valve-2", 2))).toEqual([11, 12, 14]);
  });
});

describe("DEVICE_UNAVAILABLE", () => {
  it("is returned once the unit is reported offline, and nothing is sent", async () => {
    const { n, before } = await valve2Lease();
    sim.mute(true, 2);
    // Each read is one poll that times out; after two the bus reports the unit offline. (Each
    // such read's reply already says offline: the device did not answer it. So read twice,
    // not until the first offline reply.)
    let state = await gatewayState("valve-2");
    expect(state.online).toBe(false);
    state = await gatewayState("valve-2");
    expect(state.online).toBe(false);

    const error = refusal(await a.command("valve-2", n, 0, { position: 44 }), "DEVICE_UNAVAILABLE", /link|device/);
    expect(error.fence).toEqual({ token: n, seq: null });
    expect(error.lease).toMatchObject({ holder: "ctl-a", token: n });

    sim.mute(false, 2);
    for (let i = 0; i < 4 && !state.online; i++) state = await gatewayState("valve-2");
    expect(state).toMatchObject({ online: true, fence: { token: n, seq: null } });
    expectUntouched(before, await deviceAfterFlush("valve-2", 2));
    // Never accepted: its seq is still free.
    expect(await a.command("valve-2", n, 0, { position: 44 })).toMatchObject({ ok: true, outcome: "applied", seq: 0 });
  });
});

/** Writes a command block straight to the simulator, as a rogue master would, behind the gateway's back. */
async function rogueCommand(unit: number, token: number, position: number): Promise<void> {
  const rogue = new ModbusRTU();
  await rogue.connectTCP(sim.tcp!.host, { port: sim.tcp!.port });
  try {
    rogue.setID(unit);
    rogue.setTimeout(2000);
    await rogue.writeRegisters(FENCED.COMMAND_START, encodeCommandBlock({ token, seq: 0, setpoints: { position } }));
  } finally {
    await new Promise<void>((resolve) => rogue.close(() => resolve()));
  }
}

describe("DEVICE_REJECTED", () => {
  it("is returned when the device's own fence is ahead, and no later grant is at or below the device's token", async () => {
    const { n } = await valve2Lease();
    expect(await a.command("valve-2", n, 0, { position: 40 })).toMatchObject({ ok: true, outcome: "applied" });
    const deviceToken = n + 1000;
    await rogueCommand(2, deviceToken, 55);
    const before = sim.device(2);
    expect(before.fence.token).toBe(deviceToken);

    sim.setDelay(SLOW_DEVICE_MS, 2); // a slow device: every transaction with it takes a while
    const error = refusal(await a.command("valve-2", n, 1, { position: 60 }), "DEVICE_REJECTED", /fence/);
    // The refusal already reports the device's fence as the actuator's.
    expect(error.fence).toEqual({ token: deviceToken, seq: null });
    // At once, with nothing in between: the holder gives up, another takes a lease; its
    // token is above the device's.
    await a.request("valve-2", "lease/release", { holder: "ctl-a", token: n }); // refused if the lease already ended
    const granted = await b.acquire("valve-2", 5000);
    expect(granted).toMatchObject({ ok: true, lease: { holder: "ctl-b" } });
    held.push({ ctl: b, actuator: "valve-2", token: granted.lease.token });
    expect(granted.lease.token).toBeGreaterThan(deviceToken);
    sim.setDelay(0, 2);

    const after = await deviceAfterFlush("valve-2", 2);
    expectUntouched(before, after);
    expect(after.targetPosition).toBe(55);
    expect(await b.command("valve-2", granted.lease.token, 0, { position: 70 })).toMatchObject({ ok: true, outcome: "applied" });
    expect(sim.device(2)).toMatchObject({ targetPosition: 70, fence: { token: granted.lease.token } });
  });
});

describe("DEVICE_ERROR", () => {
  // 0x06 (busy): an exception that means "not done". 0x04 was used here once: a
  // device failure while acting leaves the effect uncertain, so it is OUTCOME_UNKNOWN now.
  it("carries the device's Modbus exception code, and the device did not act", async () => {
    const { n, before } = await valve2Lease();
    sim.answerException(6, -1, 2);
    const error = refusal(await a.command("valve-2", n, 0, { position: 33 }), "DEVICE_ERROR", /exception 0x06/);
    expect(error.modbusCode).toBe(6);
    sim.clearFaults(2);
    expectUntouched(before, await deviceAfterFlush("valve-2", 2));
  });
});

describe("OUTCOME_UNKNOWN", () => {
  it("is returned when the device acts but its reply is lost; the fence stays raised and a retry is a DUPLICATE that writes nothing", async () => {
    const { n, before } = await valve2Lease();
    sim.dropResponses(-1, 2);
    const error = refusal(await a.command("valve-2", n, 0, { position: 66 }), "OUTCOME_UNKNOWN", /re-read/i);
    sim.clearFaults(2);
    expect(error.fence).toEqual({ token: n, seq: 0 });
    // It did act: that is why the outcome is unknown, not "nothing happened".
    const acted = await deviceAfterFlush("valve-2", 2);
    expect(appliedSince(before, acted)).toEqual([66]);
    expect(await gatewayState("valve-2")).toMatchObject({ fence: { token: n, seq: 0 } });

    const duplicate = refusal(await a.command("valve-2", n, 0, { position: 66 }), "DUPLICATE", /original/);
    expect(duplicate.original).toEqual({ ok: false, error: { code: "OUTCOME_UNKNOWN", message: error.message } });
    expectUntouched(acted, await deviceAfterFlush("valve-2", 2));
  });
});

describe("TOKENS_EXHAUSTED", () => {
  it("is returned when the device's fence already holds the highest token, saying what to do", async () => {
    const before = sim.device(3);
    expect(before.fence.token).toBe(MAX_TOKEN);
    const error = refusal(await a.acquire("valve-max", 5000), "TOKENS_EXHAUSTED", /token/);
    expect(error.message).toMatch(/\b(replace|reset|recommission)\b/i);
    expect(await gatewayState("valve-max")).toMatchObject({ lease: null, fence: { token: MAX_TOKEN } });
    expectUntouched(before, await deviceAfterFlush("valve-max", 3));
  });
});

// ---------------------------------------------------------------------------------------
// Reply routes

describe("reply routes", () => {
  it("MQTT 5: the reply goes to the request's response topic with its correlation data echoed, and nowhere else", async () => {
    const responseTopic = "test/routes/v5-responses";
    const log = await TopicWatcher.connect(brokerUrl, [responseTopic, `${BASE}/valve-1/reply/+`]);
    const withId = (id: string) => (m: { payload: string }) => safeJson(m.payload)?.id === id;
    try {
      const correlationData = Buffer.from([0, 1, 0xfe, 0xff]);
      await log.client.publishAsync(`${BASE}/valve-1/read`, JSON.stringify({ id: "route-v5", holder: "ctl-r" }), {
        qos: 1,
        properties: { responseTopic, correlationData },
      });
      const reply = await log.waitFor(withId("route-v5"), { what: "the v5 reply" });
      expect(reply.topic).toBe(responseTopic);
      expect(reply.correlationData).toEqual(correlationData);
      expect(reply.retain).toBe(false);
      expect(safeJson(reply.payload)).toMatchObject({ ok: true, state: { actuator: "valve-1" } });
      // A later request without a response topic is answered on B/A/reply/H; by the time it
      // is, a copy of the first reply sent there would have arrived too.
      await log.client.publishAsync(`${BASE}/valve-1/read`, JSON.stringify({ id: "route-fallback", holder: "ctl-r" }), { qos: 1 });
      const fallback = await log.waitFor(withId("route-fallback"), { what: "the fallback reply" });
      expect(fallback.topic).toBe(`${BASE}/valve-1/reply/ctl-r`);
      expect(log.messages.map((m) => [m.topic, safeJson(m.payload)?.id])).toEqual([
        [responseTopic, "route-v5"],
        [`${BASE}/valve-1/reply/ctl-r`, "route-fallback"],
      ]);
    } finally {
      await log.close();
    }
  });

  it("MQTT 3.1.1: the reply goes to B/A/reply/H", async () => {
    const v4 = await TestController.connect(brokerUrl, "ctl-v4", { v5: false });
    try {
      const topics: string[] = [];
      v4.client.on("message", (topic) => topics.push(topic));
      const reply = await v4.acquire("valve-1", 5000);
      expect(reply).toMatchObject({ ok: true, lease: { holder: "ctl-v4" } });
      expect(topics).toEqual([`${BASE}/valve-1/reply/ctl-v4`]);
      expect(await v4.request("valve-1", "lease/release", { holder: "ctl-v4", token: reply.lease.token })).toMatchObject({
        ok: true,
        lease: null,
      });
    } finally {
      await v4.close();
    }
  });

  it("a read without holder and without response topic is answered on B/A/reply/_", async () => {
    const log = await TopicWatcher.connect(brokerUrl, [`${BASE}/valve-1/reply/+`], { v5: false });
    try {
      await log.client.publishAsync(`${BASE}/valve-1/read`, JSON.stringify({ id: "anonymous-read" }), { qos: 1 });
      const reply = await log.waitFor((m) => safeJson(m.payload)?.id === "anonymous-read", { what: "the read reply" });
      expect(reply.topic).toBe(`${BASE}/valve-1/reply/_`);
      expect(safeJson(reply.payload)).toMatchObject({ ok: true, state: { actuator: "valve-1", online: true } });
    } finally {
      await log.close();
    }
  });
});
