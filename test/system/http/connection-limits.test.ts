/**
 * Idle and slow TCP connections cannot keep the HTTP port from answering (src/adapters/http/
 * connections.ts): 80 and more connections that send nothing, or headers that never end,
 * leave /healthz answered at once; an idle connection is closed within the headers timeout;
 * one address cannot hold more than its share.
 */
import http from "node:http";
import net from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { GatewayMetrics, HEADERS_TIMEOUT_MS, serveHttp, type HealthSource } from "../../../src/adapters/http/metrics.ts";
import { until } from "../../support/watch.ts";

const health: HealthSource = {
  problem: () => null,
  details: () => ({}),
  queueDepths: () => [],
  linkStates: () => [],
  pointFaults: () => [],
  journalLag: () => ({ records: 0, oldestMs: 0, commits: 0 }),
};
/** The daemon's: metrics.statusPage.maxEventStreams (16) + 64. */
const MAX_CONNECTIONS = 80;
const TOKEN = "a-token-of-sixteen+";

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0)) f();
});

async function serve(options: { auth?: { token: string } } = {}): Promise<number> {
  const server = await serveHttp("127.0.0.1", 0, new GatewayMetrics(health), health, {
    maxConnections: MAX_CONNECTIONS,
    auth: options.auth ?? null,
  });
  cleanup.push(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

/** Opens `n` raw connections (from `localAddress`), writing `first` on each if given; resolves once all are connected. */
async function sockets(port: number, n: number, options: { first?: string; localAddress?: string } = {}): Promise<net.Socket[]> {
  const all = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect(
            { port, host: "127.0.0.1", ...(options.localAddress ? { localAddress: options.localAddress } : {}) },
            () => {
              if (options.first) s.write(options.first);
              resolve(s);
            },
          );
          s.on("error", () => {}); // closed by the server: expected for some
          s.once("error", reject);
        }),
    ),
  );
  cleanup.push(() => all.forEach((s) => s.destroy()));
  // Let the server see every one before the next step.
  await new Promise((r) => setTimeout(r, 100));
  return all;
}

/** GET /healthz; resolves with the status, or rejects after `timeoutMs`. */
function healthz(port: number, headers: Record<string, string> = {}, timeoutMs = 1000): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/healthz", headers, agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer to /healthz within ${timeoutMs} ms`)));
    req.on("error", reject);
  });
}

const closedCount = (all: net.Socket[]) => all.filter((s) => s.destroyed || s.readableEnded).length;

describe("HTTP connection limits", () => {
  it("answers /healthz at once past 100 idle connections that send nothing, again and again", async () => {
    const port = await serve();
    for (let round = 0; round < 3; round++) {
      await sockets(port, 100);
      expect(await healthz(port)).toBe(200);
    }
  });

  it("answers /healthz past 100 connections whose headers never end, and an authenticated request with credentials", async () => {
    const port = await serve({ auth: { token: TOKEN } });
    await sockets(port, 100, { first: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" });
    expect(await healthz(port, { authorization: `Bearer ${TOKEN}` })).toBe(200);
    expect(await healthz(port)).toBe(401);
  });

  it(
    "closes a connection that sends nothing within the headers timeout",
    async () => {
      const port = await serve();
      const [idle] = await sockets(port, 1);
      idle!.resume(); // reads what the server may say (a 408) before closing: else its end is never seen
      const startedMs = performance.now();
      await new Promise((r) => idle!.once("close", r));
      const closedAfterMs = performance.now() - startedMs;
      expect(closedAfterMs).toBeLessThan(HEADERS_TIMEOUT_MS + 2000);
    },
    HEADERS_TIMEOUT_MS + 5000,
  );

  it("keeps one address to half the connections: its own oldest idle ones give way, not another address's", async () => {
    const port = await serve();
    const other = await sockets(port, 10, { localAddress: "127.0.0.3" });
    const flood = await sockets(port, 60, { localAddress: "127.0.0.2" });
    await until(() => closedCount(flood) >= 60 - MAX_CONNECTIONS / 2, { what: "the evicted connections' end" });
    await new Promise((r) => setTimeout(r, 50)); // and no more
    expect(closedCount(flood)).toBe(60 - MAX_CONNECTIONS / 2);
    expect(flood.slice(0, 60 - MAX_CONNECTIONS / 2).every((s) => s.destroyed || s.readableEnded)).toBe(true); // the oldest
    expect(closedCount(other)).toBe(0);
  });

  it("past the total, closes the oldest idle connections, whichever address they come from", async () => {
    const port = await serve();
    const first = await sockets(port, 39, { localAddress: "127.0.0.2" });
    const second = await sockets(port, 39, { localAddress: "127.0.0.3" });
    const third = await sockets(port, 10, { localAddress: "127.0.0.4" });
    const over = 39 + 39 + 10 - MAX_CONNECTIONS;
    await until(() => closedCount(first) >= over, { what: "the evicted connections' end" });
    await new Promise((r) => setTimeout(r, 50)); // and no more
    expect(first.slice(0, over).every((s) => s.destroyed || s.readableEnded)).toBe(true);
    expect([closedCount(first), closedCount(second), closedCount(third)]).toEqual([over, 0, 0]);
    expect(await healthz(port)).toBe(200);
  });
});
