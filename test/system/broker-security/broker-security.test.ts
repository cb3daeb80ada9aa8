/**
 * Broker security end to end, on a real Mosquitto configured with the repository's own ACL
 * (config/mosquitto/acl), a password file and a TLS listener that requires client
 * certificates from a CA made for this run: the daemon connects over mqtts, controllers
 * read only their own replies and cannot publish as the gateway, wrong credentials are
 * refused while the daemon keeps retrying, and credentials never leave over plain mqtt://
 * unless the configuration says so.
 */
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { brokerAddress, FencegateClient } from "fencegate-client";
import mqtt, { type IClientOptions, type MqttClient } from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { runDoctor } from "../../../src/doctor/checks.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { runToolOrThrow } from "../../support/processes.ts";
import { stopDaemon, Teardown } from "../../support/stack.ts";
import { makePki, type Pki } from "./pki.ts";

const ACL = resolve(import.meta.dirname, "../../../config/mosquitto/acl");
const GATEWAY_USER = "gw-boilerhouse"; // as in the example ACL
const PASSWORDS: Record<string, string> = { [GATEWAY_USER]: "gw-secret", "plc-a": "a-secret", "plc-b": "b-secret" };

const teardown = new Teardown();
let dir: string;
let pki: Pki;
let passwordFile: string;
let broker: Broker;
let tlsUrl: string;
let sim: SimulatorHandle;
let daemon: DaemonProcess;

function tlsOf(name: string) {
  return { caFile: pki.caFile, ...pki.client(name) };
}

/** A bare MQTT 5 client over TLS as `user` (certificate and password), for spying and forging. */
async function rawClient(user: string, extra: IClientOptions = {}): Promise<MqttClient> {
  const { caFile, certFile, keyFile } = tlsOf(user);
  const { readFileSync } = await import("node:fs");
  return teardown.add(
    await mqtt.connectAsync({
      ...brokerAddress(tlsUrl),
      protocolVersion: 5,
      clientId: `${user}-raw-${Math.random().toString(36).slice(2, 8)}`,
      username: user,
      password: PASSWORDS[user],
      ca: readFileSync(caFile),
      cert: readFileSync(certFile),
      key: readFileSync(keyFile),
      reconnectPeriod: 0,
      ...extra,
    }),
    (c) => c.endAsync(true),
  );
}

async function controller(holder: string, protocolVersion: 4 | 5 = 5): Promise<FencegateClient> {
  return teardown.add(
    await FencegateClient.connect({
      url: tlsUrl,
      holder,
      username: holder,
      password: PASSWORDS[holder],
      tls: tlsOf(holder),
      protocolVersion,
      requestTimeoutMs: 5000,
    }),
    (c) => c.close(),
  );
}

/** Everything a client receives, as [topic, payload]. */
function record(client: MqttClient): [string, string][] {
  const seen: [string, string][] = [];
  client.on("message", (topic, payload) => seen.push([topic, payload.toString()]));
  return seen;
}

const settle = (ms = 500) => new Promise((r) => setTimeout(r, ms));

function daemonConfig(journalDir: string, mqttSettings: Record<string, unknown>, gatewayId = "test", actuator = "valve-1", unit = 1) {
  return {
    ...gatewayConfig({
      brokerUrl: tlsUrl,
      journalPath: join(journalDir, "journal.db"),
      buses: { sim: { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 500 } },
      actuators: [valve(actuator, "sim", unit)],
      mqtt: { reconnect: { minMs: 100, maxMs: 400 }, ...mqttSettings },
    }),
    gatewayId,
  };
}

beforeAll(async () => {
  dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-broker-security-")), (d) => rmSync(d, { recursive: true, force: true }));
  // Mosquitto started as root drops to the mosquitto user: it must be able to read these.
  chmodSync(dir, 0o755);
  pki = makePki(dir);
  passwordFile = join(dir, "mosquitto.passwd");
  for (const [user, password] of Object.entries(PASSWORDS)) {
    runToolOrThrow("mosquitto_passwd", ["-b", ...(user === GATEWAY_USER ? ["-c"] : []), passwordFile, user, password]);
  }
  chmodSync(passwordFile, 0o644);
  // The committed ACL, copied beside them: the checkout itself may not be readable by the
  // mosquitto user (a clone inside a mode-700 directory, such as mktemp -d makes).
  const acl = join(dir, "acl");
  copyFileSync(ACL, acl);
  chmodSync(acl, 0o644);
  broker = teardown.add(
    await startMosquitto((tlsPort) =>
      [
        "allow_anonymous false",
        `password_file ${passwordFile}`,
        `acl_file ${acl}`,
        `listener ${tlsPort} 127.0.0.1`,
        `cafile ${pki.caFile}`,
        `certfile ${pki.server.certFile}`,
        `keyfile ${pki.server.keyFile}`,
        "require_certificate true",
      ].join("\n"),
    ),
    (b) => b.stop(),
  );
  tlsUrl = `mqtts://127.0.0.1:${broker.extraPort}`;
  sim = teardown.add(await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1, 2], rate: 0 }), (s) => s.close());
  const gwDir = join(dir, "gw");
  mkdirSync(gwDir);
  writeFileSync(join(gwDir, "gw-password"), `${PASSWORDS[GATEWAY_USER]}\n`, { mode: 0o600 });
  daemon = teardown.add(
    DaemonProcess.start(gwDir, daemonConfig(gwDir, { username: GATEWAY_USER, passwordFile: "gw-password", tls: tlsOf(GATEWAY_USER) })),
    (d) => stopDaemon(d),
  );
  await daemon.ready(["valve-1"], 30_000);
});
afterAll(() => teardown.run());

describe("over mqtts with a CA and client certificates", () => {
  it("the daemon connects and serves a controller that has its own certificate and password", async () => {
    expect(daemon.logs.find((l) => l.msg === "MQTT connected")).toMatchObject({ broker: tlsUrl });
    const a = await controller("plc-a");
    const lease = await a.acquire("valve-1", { ttlMs: 5000 });
    const applied = await lease.command({ position: 42 });
    expect(applied).toMatchObject({ applied: { position: 42 } });
    await lease.release();
  });

  it("a host name is verified against the certificate's DNS name (SNI), as well as an address", async () => {
    const configDir = join(dir, "doctor-name");
    mkdirSync(configDir);
    const file = join(configDir, "gateway.yaml");
    const { stringify } = await import("yaml");
    const config = daemonConfig(configDir, {
      username: GATEWAY_USER,
      password: PASSWORDS[GATEWAY_USER],
      tls: tlsOf(GATEWAY_USER),
    }) as Record<string, any>;
    writeFileSync(file, stringify({ ...config, mqtt: { ...config.mqtt, url: tlsUrl.replace("127.0.0.1", "localhost") } }));
    expect((await runDoctor(file)).find((f) => f.check === "broker")).toMatchObject({ status: "ok" });
  });

  it("a client certificate from another CA is refused at the TLS handshake", async () => {
    const { readFileSync } = await import("node:fs");
    const attempt = mqtt.connectAsync({
      ...brokerAddress(tlsUrl),
      protocolVersion: 5,
      username: "plc-a",
      password: PASSWORDS["plc-a"],
      ca: readFileSync(pki.caFile),
      cert: readFileSync(pki.stranger.certFile),
      key: readFileSync(pki.stranger.keyFile),
      reconnectPeriod: 0,
      connectTimeout: 5000,
    });
    await expect(attempt).rejects.toThrow();
  });
});

describe("the example ACL", () => {
  it("a controller cannot read another controller's replies, on v5 response topics or on B/A/reply/H", async () => {
    const spy = await rawClient("plc-a");
    const seen = record(spy);
    // Subscriptions the ACL must starve: B's private prefix, B's 3.1.1 reply topic, everything.
    await spy.subscribeAsync(["fencegate/_client/plc-b/#", "fencegate/+/reply/plc-b", "fencegate/#"], { qos: 1 });
    const b5 = await controller("plc-b", 5);
    const b4 = await controller("plc-b", 4);
    expect((await b5.read("valve-1")).actuator).toBe("valve-1");
    expect((await b4.read("valve-1")).actuator).toBe("valve-1");
    await settle();
    const topics = seen.map(([t]) => t);
    expect(topics.filter((t) => t.includes("/reply/") || t.includes("/_client/"))).toEqual([]);
    // The subscription itself works: the retained state arrives.
    expect(topics).toContain("fencegate/valve-1/state");
  });

  it("a controller cannot publish as the gateway: no state, events, replies or status", async () => {
    const forger = await rawClient("plc-a");
    const observer = await rawClient("plc-b");
    const seen = record(observer);
    await observer.subscribeAsync(["fencegate/#"], { qos: 1 });
    await settle(200);
    const forged = [
      "fencegate/valve-1/state",
      "fencegate/valve-1/events",
      "fencegate/valve-1/reply/plc-b",
      "fencegate/_client/plc-b/inbox",
      "fencegate/gateway/test/status",
    ];
    const results = await Promise.all(
      forged.map((topic) =>
        forger.publishAsync(topic, "forged", { qos: 1, retain: topic.endsWith("/state") }).then(
          () => "accepted",
          (err: Error) => err.message,
        ),
      ),
    );
    await settle();
    expect(seen.filter(([, payload]) => payload === "forged")).toEqual([]);
    // Mosquitto 2.0 answers a v5 publish it refuses with PUBACK "Not authorized" (0x87).
    for (const r of results) expect(r).toMatch(/not authorized/i);
    // What a controller may publish still goes through: a read, answered on its own topic.
    const a = await controller("plc-a");
    expect((await a.read("valve-1")).actuator).toBe("valve-1");
  });

  it("doctor says when the configured user may not subscribe to the request topics", async () => {
    const configDir = join(dir, "doctor-acl");
    mkdirSync(configDir);
    const file = join(configDir, "gateway.yaml");
    const { stringify } = await import("yaml");
    writeFileSync(file, stringify(daemonConfig(configDir, { username: "plc-a", password: PASSWORDS["plc-a"], tls: tlsOf("plc-a") })));
    const findings = await runDoctor(file);
    expect(findings.find((f) => f.check === "broker")).toMatchObject({ status: "ok" });
    expect(findings.find((f) => f.check === "broker acl")).toMatchObject({
      status: "fail",
      message: expect.stringContaining("the broker's ACL does not let plc-a read the request topics"),
    });
    // The gateway's own user passes the same probe (no running daemon answers it: each hears its own actuators only).
    writeFileSync(
      file,
      stringify(daemonConfig(configDir, { username: GATEWAY_USER, password: PASSWORDS[GATEWAY_USER], tls: tlsOf(GATEWAY_USER) })),
    );
    expect((await runDoctor(file)).find((f) => f.check === "broker acl")).toMatchObject({
      status: "ok",
      message: expect.stringContaining("Receives requests"),
    });
  });

  it("doctor says when the broker's certificate is not trusted (no caFile)", async () => {
    const configDir = join(dir, "doctor-tls");
    mkdirSync(configDir);
    const file = join(configDir, "gateway.yaml");
    const { stringify } = await import("yaml");
    const { caFile: _ca, ...noCa } = tlsOf(GATEWAY_USER);
    writeFileSync(file, stringify(daemonConfig(configDir, { username: GATEWAY_USER, password: PASSWORDS[GATEWAY_USER], tls: noCa })));
    const broker = (await runDoctor(file)).find((f) => f.check === "broker");
    expect(broker).toMatchObject({
      status: "fail",
      message: expect.stringContaining("The broker's TLS certificate is not trusted"),
      fix: expect.stringContaining("mqtt.tls.caFile"),
    });
  });
});

/** A logged error's text: the start-up probe logs its reason, the link the error (pino's serializer: its message). */
const errorText = (err: unknown) => (typeof err === "string" ? err : String((err as { message?: unknown } | undefined)?.message));

describe("wrong credentials", () => {
  it("are refused; the daemon keeps retrying without crashing and connects once the broker accepts them", async () => {
    const wrongDir = join(dir, "wrong");
    mkdirSync(wrongDir);
    const wrong = teardown.add(
      DaemonProcess.start(
        wrongDir,
        daemonConfig(wrongDir, { username: GATEWAY_USER, password: "not-the-password", tls: tlsOf(GATEWAY_USER) }, "test2", "valve-2", 2),
      ),
      (d) => stopDaemon(d),
    );
    const refusals = () =>
      wrong.logs.filter((l) => l.msg === "MQTT error" && /not authorized|bad user name or password/i.test(errorText(l.err)));
    await wrong.waitForLog(() => refusals().length >= 3, 30_000, "three refused connection attempts");
    expect(wrong.child.exitCode).toBeNull();
    expect(wrong.logs.some((l) => l.msg === "MQTT connected")).toBe(false);
    // The operator fixes the broker's side; Mosquitto reloads its password file on SIGHUP.
    runToolOrThrow("mosquitto_passwd", ["-b", passwordFile, GATEWAY_USER, "not-the-password"]);
    broker.signal("SIGHUP");
    await wrong.waitForLog((l) => l.msg === "MQTT connected", 30_000, "MQTT connected after the fix");
    runToolOrThrow("mosquitto_passwd", ["-b", passwordFile, GATEWAY_USER, PASSWORDS[GATEWAY_USER]!]);
    broker.signal("SIGHUP");
  });
});

describe("credentials over plain mqtt://", () => {
  it("are refused at config load without allowCleartextCredentials: exit 78 before any connection", async () => {
    let connections = 0;
    const listener = net.createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
    teardown.add(listener, (l) => new Promise((r) => l.close(r)));
    const port = (listener.address() as net.AddressInfo).port;
    const plainDir = join(dir, "plain");
    mkdirSync(plainDir);
    const refused = DaemonProcess.start(plainDir, {
      ...daemonConfig(plainDir, { username: "plc-a", password: "a-secret" }),
      mqtt: { url: `mqtt://127.0.0.1:${port}`, username: GATEWAY_USER, password: "x" },
    });
    const exit = await refused.exited;
    expect(exit.code).toBe(78);
    expect(refused.stderr).toContain("mqtt.url");
    expect(refused.stderr).toContain("allowCleartextCredentials: true");
    expect(connections).toBe(0);
  });

  it("are sent when the configuration allows it explicitly (loopback listener)", async () => {
    const allowedDir = join(dir, "allowed");
    mkdirSync(allowedDir);
    const allowed = teardown.add(
      DaemonProcess.start(allowedDir, {
        ...daemonConfig(allowedDir, {}, "test3", "valve-2", 2),
        mqtt: { url: broker.url, username: GATEWAY_USER, password: PASSWORDS[GATEWAY_USER], allowCleartextCredentials: true },
      }),
      (d) => stopDaemon(d),
    );
    await allowed.waitForLog((l) => l.msg === "MQTT connected", 30_000, "MQTT connected over mqtt://");
  });
});
