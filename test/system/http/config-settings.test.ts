/**
 * The HTTP port's settings (metrics, /healthz, the status page): the status page is on by
 * default and on loopback; beyond loopback it needs credentials, or the configuration is
 * refused with a sentence saying why.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadConfigFile } from "../../../src/config/load.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { ConfigError } from "../../../src/config/problems.ts";
import { isLoopbackHost } from "../../../src/config/schema.ts";
import { minimalConfig } from "../../support/config-fixture.ts";
import { onlyProblem } from "../../support/config-problems.ts";
import { runFencegate } from "../../support/processes.ts";

function withMetrics(metrics: Record<string, unknown>) {
  const c = minimalConfig();
  c.metrics = metrics;
  return c;
}

describe("HTTP port settings", () => {
  it("serves the status page by default, on loopback, with 16 event streams at most", () => {
    const config = parseConfig(minimalConfig());
    expect(config.metrics).toMatchObject({
      enabled: true,
      host: "127.0.0.1",
      port: 9464,
      statusPage: { enabled: true, maxEventStreams: 16 },
    });
    expect(config.metrics.auth).toBeUndefined();
  });

  it("refuses a status page beyond loopback without credentials, saying why", () => {
    const problem = onlyProblem(withMetrics({ host: "0.0.0.0" }));
    expect(problem.path).toBe("metrics.host");
    expect(problem.message).toBe(
      "0.0.0.0 would serve the status page and /metrics (actuator ids, holders, error rates, bus states) without authentication beyond this machine: add metrics.auth (a token, or a username and password), or keep 127.0.0.1 and use a tunnel or proxy; without credentials, only with metrics.statusPage.enabled: false and metrics.allowNonLoopback: true, on a network you trust.",
    );
  });

  it("refuses allowNonLoopback without credentials while the status page is on", () => {
    const problem = onlyProblem(withMetrics({ host: "0.0.0.0", allowNonLoopback: true }));
    expect(problem.path).toBe("metrics.host");
    expect(problem.message).toBe(
      "The status page would be open to anyone who reaches 0.0.0.0: add metrics.auth (a token, or a username and password), or set metrics.statusPage.enabled: false to serve only /metrics and /healthz there.",
    );
  });

  it("the daemon refuses to start on it: exit 78, with the sentence", async () => {
    const dir = mkdtempSync(join(tmpdir(), "fencegate-http-config-"));
    const file = join(dir, "gateway.yaml");
    writeFileSync(file, stringify(withMetrics({ host: "0.0.0.0" })));
    const run = await runFencegate(["daemon", "--config", file]);
    expect(run).toMatchObject({ code: 78 });
    expect(run.stderr).toMatch(/metrics\.host.*0\.0\.0\.0 would serve the status page and \/metrics .* add metrics\.auth/);
  });

  it("takes a token or a username and password beyond loopback", () => {
    expect(parseConfig(withMetrics({ host: "0.0.0.0", auth: { token: "a-token-of-16-chars" } })).metrics.auth).toEqual({
      token: "a-token-of-16-chars",
    });
    expect(
      parseConfig(withMetrics({ host: "192.168.1.20", auth: { username: "ops", password: "twelve-chars" } })).metrics.auth,
    ).toMatchObject({ username: "ops" });
  });

  it.each([
    ["a short token", { token: "short" }, "metrics.auth.token", /at least 16 characters/],
    [
      "token and password",
      { token: "a-token-of-16-chars", username: "ops", password: "twelve-chars" },
      "metrics.auth",
      /either a token or a username and password/,
    ],
    ["a username alone", { username: "ops" }, "metrics.auth", /Give a token \(or tokenFile\), or a username with a password/],
    ["a user name with a colon", { username: "o:ps", password: "twelve-chars" }, "metrics.auth.username", /without ":"/],
  ])("refuses %s", (_what, auth, path, message) => {
    const problem = onlyProblem(withMetrics({ host: "0.0.0.0", auth }));
    expect(problem.path).toBe(path);
    expect(problem.message).toMatch(message);
  });

  it("reads the token from tokenFile, relative to the configuration, and refuses a short one", () => {
    const dir = mkdtempSync(join(tmpdir(), "fencegate-http-config-"));
    writeFileSync(join(dir, "http-token"), "0123456789abcdef0123\n");
    writeFileSync(join(dir, "short-token"), "abc\n");
    const file = (tokenFile: string) => {
      const path = join(dir, `${tokenFile}.yaml`);
      writeFileSync(path, stringify(withMetrics({ host: "0.0.0.0", auth: { tokenFile } })));
      return path;
    };
    expect(loadConfigFile(file("http-token")).metrics.auth).toMatchObject({ token: "0123456789abcdef0123" });
    expect(() => loadConfigFile(file("short-token"))).toThrow(ConfigError);
    expect(() => loadConfigFile(file("short-token"))).toThrow(/token in .*short-token must be at least 16 characters/);
  });

  it("needs no credentials on loopback, or with the status page off and allowNonLoopback", () => {
    expect(() => parseConfig(withMetrics({ host: "::1" }))).not.toThrow();
    expect(() => parseConfig(withMetrics({ host: "0.0.0.0", allowNonLoopback: true, statusPage: { enabled: false } }))).not.toThrow();
  });

  it("tells loopback addresses from the others", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"])
      expect(isLoopbackHost(host), host).toBe(true);
    for (const host of ["0.0.0.0", "::", "192.168.1.2", "gateway.local", "127.0.0.1.evil.example"])
      expect(isLoopbackHost(host), host).toBe(false);
  });
});
