import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { describe, expect, it } from "vitest";
import { loadConfigFile } from "../../../src/config/load.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { minimalConfig } from "../../support/config-fixture.ts";
import { fileProblemsOf, onlyProblem, pathsOf } from "../../support/config-problems.ts";

/** The fixture with only fenced actuators (its damper is plain) and the given group section. */
function grouped(group: Record<string, unknown>): Record<string, any> {
  const c = minimalConfig();
  c.actuators[1].profile = "fenced";
  c.group = group;
  return c;
}

const GROUP = { name: "plant-a", endpoints: ["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"] };

describe("gateway group settings", () => {
  it("are off by default: a single gateway needs no etcd", () => {
    expect(parseConfig(minimalConfig()).group).toBeUndefined();
  });

  it("take defaults for the lease, the margin and the request timeout", () => {
    expect(parseConfig(grouped(GROUP)).group).toEqual({
      ...GROUP,
      allowCleartextCredentials: false,
      leaseTtlMs: 7000,
      selfFenceMarginMs: 1000,
      requestTimeoutMs: 1000,
      etcdElectionTimeoutMs: 1000,
      acceptPlainDevices: false,
    });
  });

  it("refuse a plain device in a group, saying why and how to accept it", () => {
    const c = minimalConfig();
    c.group = GROUP;
    expect(onlyProblem(c)).toEqual({
      path: "actuators[1].profile",
      message:
        "A plain device in a gateway group is protected only by the deposed gateway's self-fencing, which rests on timing (a paused gateway could write once more after the takeover); use a fenced device, or set group.acceptPlainDevices: true if you accept that.",
    });
  });

  it("accept plain devices when the operator says so", () => {
    const c = minimalConfig();
    c.group = { ...GROUP, acceptPlainDevices: true };
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("need at least one endpoint, each an http(s) URL of scheme, host and port only", () => {
    expect(onlyProblem(grouped({ name: "g", endpoints: [] })).path).toBe("group.endpoints");
    expect(pathsOf(grouped({ name: "g", endpoints: ["etcd:2379", "mqtt://a:1", "https://u:p@a:2379", "https://a:2379/v3"] }))).toEqual([
      "group.endpoints[0]",
      "group.endpoints[1]",
      "group.endpoints[2]",
      "group.endpoints[3]",
    ]);
  });

  it("refuse a mix of http and https endpoints", () => {
    expect(onlyProblem(grouped({ name: "g", endpoints: ["https://a:2379", "http://b:2379"] }))).toEqual({
      path: "group.endpoints",
      message: "Use one scheme for every endpoint: all https:// or all http://.",
    });
  });

  it("refuse a password over http:// unless cleartext credentials are allowed", () => {
    const c = grouped({ name: "g", endpoints: ["http://a:2379"], username: "gw", password: "pw" });
    expect(onlyProblem(c).message).toMatch(/unencrypted over http:\/\//);
    c.group.allowCleartextCredentials = true;
    expect(() => parseConfig(c)).not.toThrow();
  });

  it("need user name and password together, and not both password and passwordFile", () => {
    expect(onlyProblem(grouped({ ...GROUP, password: "pw" })).path).toBe("group.username");
    expect(onlyProblem(grouped({ ...GROUP, username: "gw" })).path).toBe("group.password");
    expect(onlyProblem(grouped({ ...GROUP, username: "gw", password: "pw", passwordFile: "f" })).path).toBe("group.passwordFile");
  });

  it("take the lease TTL in whole seconds from 2 to 60", () => {
    expect(onlyProblem(grouped({ ...GROUP, leaseTtlMs: 2500, requestTimeoutMs: 500 })).message).toMatch(/whole seconds/);
    expect(pathsOf(grouped({ ...GROUP, leaseTtlMs: 1000, selfFenceMarginMs: 100, requestTimeoutMs: 100 }))).toEqual(["group.leaseTtlMs"]);
    expect(
      parseConfig(grouped({ ...GROUP, leaseTtlMs: 2000, selfFenceMarginMs: 500, requestTimeoutMs: 500, etcdElectionTimeoutMs: 100 })).group
        ?.leaseTtlMs,
    ).toBe(2000);
  });

  it("keep the margin at most half the TTL and the request timeout at most a third", () => {
    expect(onlyProblem(grouped({ ...GROUP, leaseTtlMs: 4000, selfFenceMarginMs: 2500 })).path).toBe("group.selfFenceMarginMs");
    expect(onlyProblem(grouped({ ...GROUP, leaseTtlMs: 3000, requestTimeoutMs: 1500 })).path).toBe("group.requestTimeoutMs");
  });

  it("refuse a lease that a hung etcd leader's election would outlast, naming every setting in the sum and the TTL that fits", () => {
    // 5000 - 1000 - 1666 = 2334 ms, not more than 2 x 1000 + 1000: the settings the docs once recommended.
    expect(onlyProblem(grouped({ ...GROUP, leaseTtlMs: 5000 }))).toEqual({
      path: "group.leaseTtlMs",
      message:
        'leaseTtlMs 5000 - selfFenceMarginMs 1000 - the renewal period 1666 (a third of the TTL) = 2334 ms must be more than 2 x etcdElectionTimeoutMs 1000 + requestTimeoutMs 1000 = 3000 ms: otherwise an etcd leader that hangs (a frozen VM, a partition) makes the active gateway step down before etcd has elected another. Set etcdElectionTimeoutMs to the members\' --election-timeout, then raise leaseTtlMs to 7000 or more (docs/gateway-group.md, "When etcd is in trouble").',
    });
    expect(onlyProblem(grouped({ ...GROUP, etcdElectionTimeoutMs: 2000 })).message).toMatch(/raise leaseTtlMs to 10000 or more/);
    expect(parseConfig(grouped({ ...GROUP, leaseTtlMs: 10_000, etcdElectionTimeoutMs: 2000 })).group?.leaseTtlMs).toBe(10_000);
    expect(
      onlyProblem(
        grouped({ ...GROUP, leaseTtlMs: 60_000, selfFenceMarginMs: 1000, requestTimeoutMs: 10_000, etcdElectionTimeoutMs: 20_000 }),
      ).message,
    ).toMatch(/then lower requestTimeoutMs or etcdElectionTimeoutMs/);
  });

  it("refuse TLS settings with http:// endpoints", () => {
    expect(onlyProblem(grouped({ name: "g", endpoints: ["http://a:2379"], tls: { caFile: "ca.pem" } })).path).toBe("group.tls");
  });

  it("read the password file and the TLS files relative to the configuration file, and report missing ones together", () => {
    const dir = mkdtempSync(join(tmpdir(), "fencegate-config-"));
    writeFileSync(join(dir, "etcd-password"), "s3cret\n");
    writeFileSync(join(dir, "ca.pem"), "x");
    const file = join(dir, "gateway.yaml");
    writeFileSync(file, stringify(grouped({ ...GROUP, username: "gw", passwordFile: "etcd-password", tls: { caFile: "ca.pem" } })));
    const config = loadConfigFile(file);
    expect(config.group?.password).toBe("s3cret");
    expect(config.group?.tls?.caFile).toBe(join(dir, "ca.pem"));

    writeFileSync(
      file,
      stringify(
        grouped({ ...GROUP, username: "gw", passwordFile: "missing", tls: { caFile: "ca.pem", certFile: "gw.crt", keyFile: "gw.key" } }),
      ),
    );
    expect(fileProblemsOf(file).map((p) => p.path)).toEqual(["group.passwordFile", "group.tls.certFile", "group.tls.keyFile"]);
  });
});
