/**
 * The HTTP port answers only for its own names (src/adapters/http/host-check.ts): a page
 * that DNS-rebinds its own name to 127.0.0.1 sends that name in `Host` and gets 421, while
 * loopback names, IP addresses, metrics.host and metrics.hostNames are served.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GatewayMetrics, serveHttp, type HealthSource } from "../../../src/adapters/http/metrics.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { minimalConfig } from "../../support/config-fixture.ts";

const health: HealthSource = {
  problem: () => null,
  details: () => ({}),
  queueDepths: () => [],
  linkStates: () => [],
  pointFaults: () => [],
  journalLag: () => ({ records: 0, oldestMs: 0, commits: 0 }),
};
let server: http.Server;
let port: number;

beforeAll(async () => {
  server = await serveHttp("127.0.0.1", 0, new GatewayMetrics(health), health, {
    hostNames: ["gw-1.plant.example", "Scada.Plant.Example."],
  });
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** GET /healthz on the port with this Host header; resolves with the status code. */
function statusWithHost(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/healthz", headers: { host }, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
  });
}

describe("the Host header", () => {
  it.each([
    "127.0.0.1",
    "127.0.0.1:PORT",
    "localhost:PORT",
    "LocalHost.",
    "app.localhost:PORT",
    "[::1]:PORT",
    "10.0.0.7:PORT",
    "gw-1.plant.example:PORT",
    "scada.plant.example",
  ])("%s is served", async (host) => {
    expect(await statusWithHost(host.replace("PORT", String(port)))).toBe(200);
  });

  it.each([
    "attacker.example:PORT", // a rebound name
    "attacker.example",
    "localhost.attacker.example",
    "127.0.0.1.nip.io:PORT",
    "gw-1.plant.example.attacker.example",
    "[::1",
    "127.0.0.1:PORT:PORT",
  ])("%j is refused with 421", async (host) => {
    expect(await statusWithHost(host.replace(/PORT/g, String(port)))).toBe(421);
  });

  it("metrics.hostNames takes host names only, naming the field otherwise", () => {
    expect(() => parseConfig({ ...minimalConfig(), metrics: { hostNames: ["gw/1"] } })).toThrow(/metrics\.hostNames/);
    expect(parseConfig(minimalConfig()).metrics.hostNames).toEqual([]);
  });
});
