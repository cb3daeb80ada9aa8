/**
 * The status page's HTTP endpoints against bad input and many clients: the real daemon
 * (real Mosquitto, the simulated valves) for the endpoints, the event-stream limit and the
 * secrets; the routes in this process, on a real socket, for a client that stops reading
 * and for the credentials.
 */
import http from "node:http";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GatewayMetrics, serveHttp, type HealthSource } from "../../../src/adapters/http/metrics.ts";
import { StatusBoard } from "../../../src/adapters/http/status-board.ts";
import { StatusRoutes } from "../../../src/adapters/http/status-routes.ts";
import { AuditReader } from "../../../src/adapters/journal/audit.ts";
import { TestController } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { freePort } from "../../support/ports.ts";
import { Teardown, startStack } from "../../support/stack.ts";

const MAX_STREAMS = 4;
const BROKER_PASSWORD = "broker-password-never-shown";
const teardown = new Teardown();
let base: string;
let ctl: TestController;

interface Answer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

function get(url: string, headers: Record<string, string> = {}, method = "GET"): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Opens an event stream; resolves with its status and a handle that collects what arrives. */
function stream(url: string): Promise<{ status: number; text: () => string; body: Promise<string>; close: () => void }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, (res) => {
      let text = "";
      res.setEncoding("utf8").on("data", (c: string) => (text += c));
      const body = new Promise<string>((done) => res.on("end", () => done(text)).on("close", () => done(text)));
      resolve({ status: res.statusCode!, text: () => text, body, close: () => req.destroy() });
    });
    req.on("error", reject);
  });
}

beforeAll(async () => {
  const port = await freePort();
  const stack = await startStack(teardown, {
    name: "status-http",
    sim: () => ({ units: [1, 2], rate: 0 }),
    gateway: ({ host, port: simPort }) => ({
      buses: { sim: { type: "tcp", host, port: simPort, timeoutMs: 500 } },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2, "fenced", { authenticatedCommands: true })],
      mqtt: { username: "gateway", password: BROKER_PASSWORD, allowCleartextCredentials: true },
      metricsPort: port,
      metrics: { statusPage: { maxEventStreams: MAX_STREAMS } },
    }),
    fenced: ["valve-1", "valve-2"],
  });
  base = `http://127.0.0.1:${port}`;
  ctl = teardown.add(await TestController.connect(stack.broker.url, "ops-1"), (c) => c.close());
});

afterAll(() => teardown.run());

describe("status page endpoints, bad input", () => {
  it("answers an unknown actuator with 404 UNKNOWN_ACTUATOR and a malformed one with 400", async () => {
    const unknown = await get(`${base}/api/actuators/valve-9/audit`);
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.body)).toEqual({ error: { code: "UNKNOWN_ACTUATOR", message: 'No actuator "valve-9" on this gateway.' } });
    for (const id of ["Valve-1", "%ZZ", "a%2Fb", "x".repeat(65)]) {
      const bad = await get(`${base}/api/actuators/${id}/audit`);
      expect(bad.status, id).toBe(400);
      expect(JSON.parse(bad.body).error.code).toBe("INVALID_REQUEST");
    }
  });

  it.each([
    ["limit=0", /limit must be a whole number from 1 to 100/],
    ["limit=101", /limit must be a whole number from 1 to 100/],
    ["limit=1e2", /limit must be a whole number/],
    ["limit=-1", /limit must be a whole number/],
    ["before=99999999999999999999", /before must be a whole number/],
    ["outcome=ok", /outcome must be one of applied, failed, pending/],
    ["holder=op%201", /holder must be 1 to 128/],
    [`holder=${"h".repeat(129)}`, /holder must be 1 to 128/],
    ["since=yesterday", /since must be a date and time/],
    [`since=${"2".repeat(41)}`, /since must be at most 40 characters/],
    ["follow=1", /Unknown parameter "follow"; the audit trail takes holder, outcome, since, before and limit/],
    ["limit=5&limit=6", /"limit" is given twice/],
  ])("refuses ?%s with 400 and a sentence", async (query, message) => {
    const answer = await get(`${base}/api/actuators/valve-1/audit?${query}`);
    expect(answer.status).toBe(400);
    const body = JSON.parse(answer.body);
    expect(body.error.code).toBe("INVALID_REQUEST");
    expect(body.error.message).toMatch(message);
  });

  it("refuses a huge request target with 414 before reading it, and stays up", async () => {
    const huge = await get(`${base}/api/actuators/valve-1/audit?holder=${"a".repeat(5000)}`);
    expect(huge.status).toBe(414);
    const hugeHeaders = await get(`${base}/api/status`, { "x-junk": "j".repeat(20_000) }).catch((e: Error) => e);
    expect(hugeHeaders instanceof Error || hugeHeaders.status === 431).toBe(true);
    expect((await get(`${base}/api/status`)).status).toBe(200);
  });

  it("takes no parameters where none are defined, and only GET", async () => {
    expect((await get(`${base}/api/status?x=1`)).status).toBe(400);
    expect((await get(`${base}/api/events?x=1`)).status).toBe(400);
    expect((await get(`${base}/?x=1`)).status).toBe(400);
    expect((await get(`${base}/api/status`, {}, "POST")).status).toBe(405);
    expect((await get(`${base}/api/actuators/valve-1/audit`, {}, "DELETE")).status).toBe(405);
    expect((await get(`${base}/nothing-here`)).status).toBe(404);
  });

  it("serves a page of the audit trail, newest first, with a cursor to the next", async () => {
    const { lease } = await ctl.acquire("valve-1", 30_000);
    for (let seq = 1; seq <= 5; seq++)
      expect(await ctl.command("valve-1", lease.token, seq, { position: seq })).toMatchObject({ ok: true });
    const first = JSON.parse((await get(`${base}/api/actuators/valve-1/audit?limit=3&holder=ops-1`)).body);
    expect(first.entries.map((e: { seq: number }) => e.seq)).toEqual([5, 4, 3]);
    const second = JSON.parse((await get(`${base}/api/actuators/valve-1/audit?limit=3&holder=ops-1&before=${first.nextBefore}`)).body);
    expect(second.entries.map((e: { seq: number }) => e.seq)).toEqual([2, 1]);
    expect(second.nextBefore).toBeNull();
    await ctl.request("valve-1", "lease/release", { holder: "ops-1", token: lease.token });
  });

  it(`serves ${MAX_STREAMS} event streams at once and refuses more with 503 and a sentence`, async () => {
    const opened = await Promise.all(Array.from({ length: MAX_STREAMS + 3 }, () => stream(`${base}/api/events`)));
    try {
      const statuses = opened.map((s) => s.status).sort();
      expect(statuses).toEqual([...Array(MAX_STREAMS).fill(200), 503, 503, 503]);
      const refused = opened.find((s) => s.status === 503)!;
      expect(JSON.parse(await refused.body).error).toEqual({
        code: "TOO_MANY_STREAMS",
        message: `${MAX_STREAMS} live feeds are open, the most this gateway serves (metrics.statusPage.maxEventStreams); close a page elsewhere, or raise the limit.`,
      });
      expect(JSON.parse((await get(`${base}/api/status`)).body).streams).toMatchObject({ open: MAX_STREAMS, max: MAX_STREAMS });
    } finally {
      for (const s of opened) s.close();
    }
    // A closed stream frees its place.
    for (let i = 0; i < 50 && JSON.parse((await get(`${base}/api/status`)).body).streams.open > 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    const again = await stream(`${base}/api/events`);
    expect(again.status).toBe(200);
    again.close();
  });

  it("never shows a lease's secret or the broker's password", async () => {
    const feed = await stream(`${base}/api/events`);
    const reply = await ctl.acquire("valve-2", 30_000);
    const secret = reply.lease.secret as string;
    expect(secret).toMatch(/^[A-Za-z0-9_-]{40,}$/);
    const { lease } = reply;
    // An unsigned command: refused BAD_SIGNATURE, into the feed and the counters.
    expect(await ctl.command("valve-2", lease.token, 1, { position: 5 })).toMatchObject({ ok: false, error: { code: "BAD_SIGNATURE" } });
    await new Promise((r) => setTimeout(r, 400));
    feed.close();
    const everything = [
      feed.text(),
      ...(await Promise.all(
        ["/", "/status.js", "/status.css", "/api/status", "/api/actuators/valve-2/audit", "/metrics", "/healthz"].map(
          async (p) => (await get(`${base}${p}`)).body,
        ),
      )),
    ].join("\n");
    expect(everything).toContain('"holder":"ops-1"');
    expect(everything).toContain("BAD_SIGNATURE");
    expect(everything).not.toContain(secret);
    expect(everything).not.toContain(BROKER_PASSWORD);
  });
});

// ---------------------------------------------------------------------------------------
// In this process: the routes on a real socket, fed directly.

function board() {
  const clock = { monotonicMs: () => performance.now() };
  return new StatusBoard({
    gatewayId: "gw",
    version: "0",
    clock,
    actuators: [{ id: "valve-1", bus: "sim", unit: 1, profile: "fenced", expiry: "hold", points: [] }],
    facts: {
      brokerConnected: () => true,
      buses: () => [],
      auditLag: () => ({ records: 0, oldestMs: 0, commits: 0 }),
      journalProblem: () => null,
      healthProblem: () => null,
    },
  });
}

const health: HealthSource = {
  problem: () => null,
  details: () => ({}),
  queueDepths: () => [],
  linkStates: () => [],
  pointFaults: () => [],
  journalLag: () => ({ records: 0, oldestMs: 0, commits: 0 }),
};

async function serve(
  b: StatusBoard,
  options: { auth?: { token: string } | { username: string; password: string }; maxStreamBufferBytes?: number } = {},
) {
  const routes = new StatusRoutes({
    board: b,
    openAudit: () => AuditReader.open("/nonexistent/journal.db"),
    whenDurable: () => Promise.resolve(),
    maxEventStreams: 4,
    flushMs: 5,
    ...(options.maxStreamBufferBytes ? { maxStreamBufferBytes: options.maxStreamBufferBytes } : {}),
  });
  const server = await serveHttp("127.0.0.1", 0, new GatewayMetrics(health), health, { status: routes, auth: options.auth ?? null });
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    routes,
    close: () => {
      routes.close();
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe("status page event streams and credentials, in process", () => {
  it("closes the event stream of a client that stops reading, instead of buffering for it", async () => {
    const b = board();
    const CAP = 64 * 1024;
    const s = await serve(b, { maxStreamBufferBytes: CAP });
    // A reader that keeps up, and one that sends its request and never reads again.
    const good = await stream(`http://127.0.0.1:${s.port}/api/events`);
    const stalled = net.connect(s.port, "127.0.0.1");
    await new Promise<void>((r) => stalled.once("connect", () => r()));
    stalled.write("GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stalled.pause();
    await new Promise((r) => setTimeout(r, 50));
    expect(s.routes.streamCounts.open).toBe(2);
    const holder = "h".repeat(100);
    const deadline = performance.now() + 20_000;
    let seq = 0;
    while (s.routes.streamCounts.droppedSlow === 0 && performance.now() < deadline) {
      for (let i = 0; i < 200; i++) b.event("valve-1", { type: "accepted", holder, token: 1, seq: ++seq, at: new Date() });
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(s.routes.streamCounts).toMatchObject({ open: 1, droppedSlow: 1 });
    // The one that reads is still served, and got everything up to the end.
    b.event("valve-1", { type: "applied", holder: "last", token: 1, seq: 1, at: new Date() });
    await new Promise((r) => setTimeout(r, 50));
    expect(good.text()).toContain('"holder":"last"');
    good.close();
    stalled.destroy();
    await s.close();
  });

  it("asks for credentials when configured: a bearer token, or any user name with the token as password", async () => {
    const token = "0123456789abcdef-token";
    const s = await serve(board(), { auth: { token } });
    const url = `http://127.0.0.1:${s.port}`;
    const basic = (user: string, pass: string) => ({ authorization: `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}` });
    for (const path of ["/", "/api/status", "/metrics", "/healthz"]) {
      const denied = await get(`${url}${path}`);
      expect(denied.status, path).toBe(401);
      expect(denied.headers["www-authenticate"]).toBe('Basic realm="fencegate", charset="UTF-8"');
    }
    expect((await get(`${url}/api/status`, { authorization: `Bearer ${token}` })).status).toBe(200);
    expect((await get(`${url}/api/status`, basic("anyone", token))).status).toBe(200);
    expect((await get(`${url}/api/status`, { authorization: `Bearer ${token}x` })).status).toBe(401);
    expect((await get(`${url}/api/status`, basic(token, "wrong"))).status).toBe(401);
    expect((await get(`${url}/api/status`, { authorization: `Bearer ${"x".repeat(3000)}` })).status).toBe(401);
    await s.close();
  });

  it("checks the user name and the password of basic credentials", async () => {
    const s = await serve(board(), { auth: { username: "ops", password: "a-password-12" } });
    const url = `http://127.0.0.1:${s.port}/api/status`;
    const basic = (user: string, pass: string) => ({ authorization: `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}` });
    expect((await get(url, basic("ops", "a-password-12"))).status).toBe(200);
    expect((await get(url, basic("ops2", "a-password-12"))).status).toBe(401);
    expect((await get(url, basic("ops", "a-password-1"))).status).toBe(401);
    expect((await get(url, { authorization: "Bearer a-password-12" })).status).toBe(401);
    await s.close();
  });

  it("says what to change when the port is taken", async () => {
    const s = await serve(board());
    await expect(serveHttp("127.0.0.1", s.port, new GatewayMetrics(health), health)).rejects.toThrow(
      `port ${s.port} on 127.0.0.1 (metrics.port) is in use by another process: stop it, or choose another metrics.port (or metrics.enabled: false).`,
    );
    await s.close();
  });
});
