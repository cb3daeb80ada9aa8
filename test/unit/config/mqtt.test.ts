import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadConfigFile } from "../../../src/config/load.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { minimalConfig } from "../../support/config-fixture.ts";
import { fileProblemsOf, onlyProblem, pathsOf } from "../../support/config-problems.ts";

function writeConfig(mqtt: Record<string, unknown>, files: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-config-"));
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content);
  const c = minimalConfig();
  c.mqtt = mqtt;
  const file = join(dir, "gateway.yaml");
  writeFileSync(file, stringify(c));
  return file;
}

describe("MQTT settings", () => {
  it("password and passwordFile together are refused", () => {
    const c = minimalConfig();
    c.mqtt = { url: "mqtts://broker:8883", username: "u", password: "p", passwordFile: "secret" };
    expect(onlyProblem(c)).toEqual({ path: "mqtt.passwordFile", message: "Give either password or passwordFile, not both." });
  });

  it("credentials over plain mqtt:// are refused without allowCleartextCredentials", () => {
    const c = minimalConfig();
    c.mqtt = { url: "mqtt://broker:1883", username: "u", password: "p" };
    const problem = onlyProblem(c);
    expect(problem.path).toBe("mqtt.url");
    expect(problem.message).toContain("allowCleartextCredentials: true");
  });

  it("the url scheme is case-insensitive for the cleartext check", () => {
    const c = minimalConfig();
    c.mqtt = { url: "MQTT://broker:1883", username: "u", password: "p" };
    expect(onlyProblem(c).path).toBe("mqtt.url");
  });

  it("a username alone over plain mqtt:// is refused too", () => {
    const c = minimalConfig();
    c.mqtt = { url: "mqtt://broker:1883", username: "u" };
    expect(onlyProblem(c).path).toBe("mqtt.url");
  });

  it("credentials over mqtt:// are accepted with allowCleartextCredentials", () => {
    const c = minimalConfig();
    c.mqtt = { url: "mqtt://broker:1883", username: "u", password: "p", allowCleartextCredentials: true };
    expect(parseConfig(c).mqtt.password).toBe("p");
  });

  it("credentials over mqtts:// need no flag", () => {
    const c = minimalConfig();
    c.mqtt = { url: "mqtts://broker:8883", username: "u", password: "p" };
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("only mqtt:// and mqtts:// urls without credentials or paths are accepted", () => {
    const urls = ["ws://broker:80", "broker:1883", "mqtt://u:p@broker:1883", "mqtt://broker:1883/topic"];
    for (const url of urls) {
      const c = minimalConfig();
      c.mqtt = { url };
      expect(pathsOf(c), url).toEqual(["mqtt.url"]);
    }
  });

  it("the base topic must be one topic level without wildcards", () => {
    for (const baseTopic of ["a/b", "plant/#", "+", "", "$SYS"]) {
      const c = minimalConfig();
      c.mqtt.baseTopic = baseTopic;
      expect(pathsOf(c), baseTopic).toEqual(["mqtt.baseTopic"]);
    }
  });

  it("tls settings with an mqtt:// url are refused", () => {
    const c = minimalConfig();
    c.mqtt.tls = { rejectUnauthorized: false };
    expect(onlyProblem(c).path).toBe("mqtt.tls");
  });

  it("a client certificate needs its key", () => {
    const c = minimalConfig();
    c.mqtt = { url: "mqtts://broker:8883", tls: { certFile: "gw.crt" } };
    expect(onlyProblem(c).path).toBe("mqtt.tls.keyFile");
  });

  it("passwordFile is read relative to the configuration file", () => {
    const file = writeConfig({ url: "mqtts://broker:8883", username: "gw", passwordFile: "secret" }, { secret: "s3cret\n" });
    const config = loadConfigFile(file);
    expect(config.mqtt.password).toBe("s3cret");
    expect(config.mqtt.passwordFile).toBe(join(file, "..", "secret"));
  });

  it("a missing passwordFile is a problem at its path and line", () => {
    const file = writeConfig({ url: "mqtts://broker:8883", username: "gw", passwordFile: "secret" });
    const problems = fileProblemsOf(file);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ path: "mqtt.passwordFile", line: expect.any(Number) });
    expect(problems[0]!.message).toMatch(/secret: no such file/);
  });

  it("an empty passwordFile is a problem", () => {
    const file = writeConfig({ url: "mqtts://broker:8883", username: "gw", passwordFile: "secret" }, { secret: "\n" });
    expect(() => loadConfigFile(file)).toThrow(/mqtt.passwordFile .*is empty/);
  });

  it("missing TLS files are problems, all reported together", () => {
    const file = writeConfig(
      { url: "mqtts://broker:8883", tls: { caFile: "ca.pem", certFile: "gw.crt", keyFile: "gw.key" } },
      { "gw.crt": "x" },
    );
    expect(fileProblemsOf(file).map((p) => p.path)).toEqual(["mqtt.tls.caFile", "mqtt.tls.keyFile"]);
  });
});
