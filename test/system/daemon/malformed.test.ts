/**
 * The malformed-request corpus (test/unit/adapters/mqtt/malformed.ts, 200+ cases) replayed against
 * the real daemon through real Mosquitto: each case gets exactly the reply the contract
 * gives it (code, id, destination, correlation data) or, where the contract says so, none
 * at all; and afterwards the daemon is the same process, still answering, and nothing was
 * decided: no event, no grant, no device write.
 *
 * Efficient by construction: the cases go out in batches without waiting for replies.
 * After each case comes a marker request the edge refuses at once, on its own reply topic;
 * the daemon handles one connection's requests in order and so publishes their replies in
 * order, and the broker delivers them in order, so whatever arrives between marker i-1 and
 * marker i is case i's. The daemon's log is split the same way, which shows that a case
 * with no reply did reach the daemon and was dropped for the expected cause. One quiet
 * spell at the end catches anything late.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { ACTUATOR, MALFORMED_BASE, MALFORMED_LIMITS, malformedRequests, type MalformedCase } from "../../unit/adapters/mqtt/malformed.ts";
import { TestController, type Json } from "../../support/controller.ts";
import { valve, type DaemonProcess, type LogLine } from "../../support/daemon.ts";
import { Teardown, startStack } from "../../support/stack.ts";
import { TopicWatcher, safeJson, tcpNoDelay, type Seen } from "../../support/watch.ts";

const BASE = MALFORMED_BASE;
const cases = malformedRequests();
const BATCH = 48;
/** No reply may come later than this after the last marker's. */
const QUIET_MS = 500;
const MARKER_HOLDER = "marker";

const teardown = new Teardown();
let sim: SimulatorHandle;
let daemon: DaemonProcess;
let brokerUrl: string;
let pid: number | undefined;
let stateBefore: Json;

interface Observed {
  replies: Seen[];
  logs: LogLine[];
}
const observed: Observed[] = cases.map(() => ({ replies: [], logs: [] }));
const markerReplies: Json[] = [];
const events: Seen[] = [];

function markerId(i: number): string {
  return `marker-${i}`;
}

/** Refused with INVALID_REQUEST at the edge, synchronously, on B/valve-1/reply/marker. */
function marker(i: number): [string, string] {
  return [`${BASE}/${ACTUATOR}/lease/acquire`, JSON.stringify({ id: markerId(i), holder: MARKER_HOLDER, ttlMs: 5000, marker: i })];
}

function publishCase(publisher: TopicWatcher, c: MalformedCase): Promise<unknown> {
  const properties =
    c.responseTopic === undefined
      ? undefined
      : { responseTopic: c.responseTopic, ...(c.correlationData ? { correlationData: c.correlationData } : {}) };
  return publisher.client.publishAsync(`${BASE}/${c.actuator}/${c.topicVerb}`, c.payload, {
    qos: 1,
    retain: c.retain,
    ...(properties ? { properties } : {}),
  });
}

/** The daemon's log lines about one request at the MQTT edge: dropped (`cause`) or refused (`code`, `id`). */
function isEdgeDecision(l: LogLine): boolean {
  return typeof l.cause === "string" || (typeof l.code === "string" && typeof l.id === "string");
}

beforeAll(async () => {
  // The corpus holds whatever the bounds, given ttl bounds around 5000 ms and the contract's 16 KiB.
  expect(MALFORMED_LIMITS.maxPayloadBytes).toBe(16 * 1024);
  const stack = await startStack(teardown, {
    name: "malformed",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: ({ host, port }) => ({
      buses: { sim: { type: "tcp", host, port, timeoutMs: 500 } },
      actuators: [valve(ACTUATOR, "sim", 1)],
      leases: { minTtlMs: 100, maxTtlMs: 60_000 },
      // The corpus goes out in batches far above any one sender's rate budget: that is not what it tests.
      mqtt: {
        baseTopic: BASE,
        maxPayloadBytes: MALFORMED_LIMITS.maxPayloadBytes,
        requestBudget: {
          perRequesterPerS: 1_000_000,
          perRequesterBurst: 1_000_000,
          perActuatorPerS: 1_000_000,
          perActuatorBurst: 1_000_000,
        },
      },
    }),
    fenced: [ACTUATOR],
  });
  ({ sim, daemon } = stack);
  brokerUrl = stack.broker.url;
  pid = daemon.child.pid;
  const reader = teardown.add(await TestController.connect(brokerUrl, "reader"), (c) => c.close());
  stateBefore = (await reader.read(ACTUATOR)).state;

  // Every place a reply could go: any holder topic of any actuator level, the corpus's
  // response topics; and the events, where any decision would show.
  const observer = teardown.add(await TopicWatcher.connect(brokerUrl, [`${BASE}/+/reply/+`, "ctl/#", `${BASE}/+/events`]), (w) =>
    w.close(),
  );
  const publisher = teardown.add(await TopicWatcher.connect(brokerUrl, []), (w) => w.close());
  tcpNoDelay(publisher.client);
  const firstMessage = observer.mark();
  const firstLog = daemon.logs.length;

  for (let start = 0; start < cases.length; start += BATCH) {
    const end = Math.min(cases.length, start + BATCH);
    const sent: Promise<unknown>[] = [];
    for (let i = start; i < end; i++) {
      sent.push(publishCase(publisher, cases[i]!), publisher.client.publishAsync(...marker(i), { qos: 1 }));
    }
    await Promise.all(sent);
    // Bounded backlog at the broker: the batch is through before the next one goes out.
    await observer.waitFor((m) => safeJson(m.payload)?.id === markerId(end - 1), {
      from: firstMessage,
      what: `the reply to ${markerId(end - 1)}`,
    });
  }
  await daemon.waitForLog((l) => l.id === markerId(cases.length - 1), 5000, "the last marker");
  await observer.quiet(QUIET_MS);

  let k = 0;
  for (const m of observer.messages.slice(firstMessage)) {
    if (m.topic.endsWith("/events")) {
      events.push(m);
      continue;
    }
    const body = safeJson(m.payload);
    if (m.topic === `${BASE}/${ACTUATOR}/reply/${MARKER_HOLDER}` && body?.id === markerId(k)) {
      markerReplies.push(body);
      k++;
    } else {
      // After the last marker: nobody's, so put it on the last case, where it fails.
      observed[Math.min(k, cases.length - 1)]!.replies.push(m);
    }
  }
  k = 0;
  for (const l of daemon.logs.slice(firstLog).filter(isEdgeDecision)) {
    if (l.id === markerId(k)) k++;
    else observed[Math.min(k, cases.length - 1)]!.logs.push(l);
  }
}, 60_000);

afterAll(() => teardown.run());

describe("the replay", () => {
  it(`sent all ${cases.length} cases, each followed by a marker that was refused in order`, () => {
    expect(cases.length).toBeGreaterThanOrEqual(200);
    expect(markerReplies).toHaveLength(cases.length);
    for (const r of markerReplies) expect(r).toMatchObject({ ok: false, error: { code: "INVALID_REQUEST" } });
  });
});

describe("each malformed request gets exactly its contract outcome from the daemon", () => {
  it.each(cases.map((c, i) => [c.name, i] as const))("%s", (_name, i) => {
    const c = cases[i]!;
    const { replies, logs } = observed[i]!;
    if (c.actuator !== ACTUATOR) {
      // A gateway subscribes to its own actuators' requests only (docs/mqtt-api.md, "Several
      // gateways on one broker"): one for any other actuator level never reaches it.
      expect(replies.map((r) => `${r.topic}: ${r.payload.slice(0, 200)}`)).toEqual([]);
      expect(logs).toEqual([]);
      return;
    }
    if (c.expect.kind === "unanswerable") {
      expect(replies.map((r) => `${r.topic}: ${r.payload.slice(0, 200)}`)).toEqual([]);
      expect(logs.map((l) => l.cause)).toEqual([c.expect.cause]);
      return;
    }
    const { code, id, names, replyTo } = c.expect;
    expect(replies).toHaveLength(1);
    const reply = replies[0]!;
    expect(reply.topic).toBe(replyTo.kind === "responseTopic" ? replyTo.topic : `${BASE}/${replyTo.suffix}`);
    expect(reply.correlationData).toEqual(replyTo.kind === "responseTopic" ? c.correlationData : undefined);
    expect(reply.retain).toBe(false);
    const body = safeJson(reply.payload);
    expect(body).toEqual({ id, ok: false, error: { code, message: expect.any(String) } });
    expect(body!.error.message).toContain(names);
    expect(body!.error.message).not.toMatch(/[\r\n]/);
    expect(logs.map((l) => [l.code, l.id])).toEqual([[code, id]]);
  });
});

describe("after the replay", () => {
  it("the daemon is the same process and still answers a read", async () => {
    expect(daemon.child.pid).toBe(pid);
    expect(daemon.child.exitCode).toBeNull();
    expect(daemon.child.signalCode).toBeNull();
    const reader = await TestController.connect(brokerUrl, "reader-after");
    try {
      const read = await reader.read(ACTUATOR);
      expect(read).toMatchObject({ ok: true, state: { actuator: ACTUATOR, online: true } });
    } finally {
      await reader.close();
    }
  });

  it("nothing was decided: no event, no token granted, the device never written", async () => {
    expect(events.map((e) => e.payload)).toEqual([]);
    expect(stateBefore).toMatchObject({ lease: null, fence: { token: 0, seq: null } });
    const device = sim.device(1);
    expect(device.applied).toEqual([]);
    expect(device.fence.token).toBe(0);
    // The first grant ever is still token 1: no token was handed out, not even unannounced.
    const ctl = await TestController.connect(brokerUrl, "ctl-after");
    try {
      const state = (await ctl.read(ACTUATOR)).state;
      expect(state).toMatchObject({ lease: null, fence: stateBefore.fence });
      expect(await ctl.acquire(ACTUATOR, 5000)).toMatchObject({ ok: true, lease: { holder: "ctl-after", token: 1 } });
    } finally {
      await ctl.close();
    }
  });
});
