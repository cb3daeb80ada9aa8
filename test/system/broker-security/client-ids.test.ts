/**
 * The shipped Mosquitto configuration (config/mosquitto/mosquitto.conf) run as shipped,
 * with only its paths and ports pointed at this run: a controller that connects with the
 * gateway's MQTT client id (fencegate-<gatewayId>, public in its status topic) does not
 * knock the gateway off, because on the controllers' listener a client's id is its user
 * name; and controllers cannot log in on the gateways' listener.
 */
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { brokerAddress, FencegateClient } from "fencegate-client";
import mqtt, { type IClientOptions } from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator } from "../../../firmware-bridge/src/simulator.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { portBelowEphemeral } from "../../support/ports.ts";
import { runToolOrThrow, startProcess } from "../../support/processes.ts";
import { Teardown, stopDaemon } from "../../support/stack.ts";
import { makePki, type Pki } from "./pki.ts";

const SHIPPED = resolve(import.meta.dirname, "../../../config/mosquitto/mosquitto.conf");
const ACL = resolve(import.meta.dirname, "../../../config/mosquitto/acl");
const GATEWAY_USER = "gw-boilerhouse";
const PASSWORDS: Record<string, string> = { [GATEWAY_USER]: "gw-secret", "plc-a": "a-secret", "plc-b": "b-secret" };

const teardown = new Teardown();
let pki: Pki;
let controllersUrl: string;
let gatewaysUrl: string;
let daemon: DaemonProcess;

/** The shipped file with its paths and ports replaced, and nothing else changed. */
function shippedFor(dir: string, ports: { controllers: number; gateways: number }): string {
  const replacements: [string, string][] = [
    ["/etc/mosquitto/fencegate-gateways.passwd", join(dir, "gateways.passwd")],
    ["/etc/mosquitto/fencegate.passwd", join(dir, "controllers.passwd")],
    ["/etc/mosquitto/fencegate.acl", join(dir, "acl")],
    ["/etc/mosquitto/certs/ca.crt", pki.caFile],
    ["/etc/mosquitto/certs/server.crt", pki.server.certFile],
    ["/etc/mosquitto/certs/server.key", pki.server.keyFile],
    ["listener 8883\n", `listener ${ports.controllers} 127.0.0.1\n`],
    ["listener 8884\n", `listener ${ports.gateways} 127.0.0.1\n`],
    ["persistence true\n", "persistence false\n"],
    ["persistence_location /var/lib/mosquitto/\n", ""],
  ];
  let text = readFileSync(SHIPPED, "utf8");
  for (const [from, to] of replacements) {
    expect(text, `the shipped configuration has ${JSON.stringify(from)}`).toContain(from);
    text = text.split(from).join(to);
  }
  return text;
}

async function startBroker(conf: string): Promise<void> {
  const child = startProcess(teardown, "mosquitto", ["-c", conf]);
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  let output = "";
  await new Promise<void>((done, fail) => {
    const seen = (d: Buffer) => {
      output += d.toString();
      if (/mosquitto version \S+ running/.test(output)) done();
    };
    child.stdout!.on("data", seen);
    child.stderr!.on("data", seen);
    void exited.then(() => fail(new Error(`mosquitto exited on the shipped configuration:\n${output}`)));
  });
}

function tlsOf(user: string) {
  return { caFile: pki.caFile, ...pki.client(user) };
}

function rawOptions(user: string, clientId: string): IClientOptions {
  const { caFile, certFile, keyFile } = tlsOf(user);
  return {
    protocolVersion: 5,
    clientId,
    username: user,
    password: PASSWORDS[user],
    ca: readFileSync(caFile),
    cert: readFileSync(certFile),
    key: readFileSync(keyFile),
    reconnectPeriod: 0,
    connectTimeout: 5000,
  };
}

beforeAll(async () => {
  const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-client-ids-")), (d) => rmSync(d, { recursive: true, force: true }));
  chmodSync(dir, 0o755); // Mosquitto started as root reads these as the mosquitto user
  pki = makePki(dir);
  runToolOrThrow("mosquitto_passwd", ["-c", "-b", join(dir, "gateways.passwd"), GATEWAY_USER, PASSWORDS[GATEWAY_USER]!]);
  runToolOrThrow("mosquitto_passwd", ["-c", "-b", join(dir, "controllers.passwd"), "plc-a", PASSWORDS["plc-a"]!]);
  runToolOrThrow("mosquitto_passwd", ["-b", join(dir, "controllers.passwd"), "plc-b", PASSWORDS["plc-b"]!]);
  for (const f of ["gateways.passwd", "controllers.passwd"]) chmodSync(join(dir, f), 0o644);
  copyFileSync(ACL, join(dir, "acl"));
  chmodSync(join(dir, "acl"), 0o644);
  const ports = { controllers: await portBelowEphemeral(), gateways: await portBelowEphemeral() };
  const conf = join(dir, "mosquitto.conf");
  writeFileSync(conf, shippedFor(dir, ports));
  await startBroker(conf);
  controllersUrl = `mqtts://127.0.0.1:${ports.controllers}`;
  gatewaysUrl = `mqtts://127.0.0.1:${ports.gateways}`;
  const sim = teardown.add(await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], rate: 0 }), (s) => s.close());
  const config = gatewayConfig({
    brokerUrl: gatewaysUrl,
    journalPath: join(dir, "journal.db"),
    buses: { sim: { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 500 } },
    actuators: [valve("valve-1", "sim", 1)],
    mqtt: { username: GATEWAY_USER, password: PASSWORDS[GATEWAY_USER], tls: tlsOf(GATEWAY_USER), reconnect: { minMs: 100, maxMs: 400 } },
  });
  daemon = teardown.add(DaemonProcess.start(dir, config), (d) => stopDaemon(d));
  await daemon.ready(["valve-1"], 30_000);
});
afterAll(() => teardown.run());

describe("the shipped Mosquitto configuration binds client ids to users", () => {
  it("a controller connecting again and again with the gateway's client id does not knock the gateway off", async () => {
    for (let i = 0; i < 5; i++) {
      const intruder = await mqtt.connectAsync({ ...brokerAddress(controllersUrl), ...rawOptions("plc-a", "fencegate-test") });
      await new Promise((r) => setTimeout(r, 200));
      await intruder.endAsync(true);
    }
    const plc = await FencegateClient.connect({
      url: controllersUrl,
      holder: "plc-b",
      username: "plc-b",
      password: PASSWORDS["plc-b"],
      tls: tlsOf("plc-b"),
    });
    try {
      expect(await plc.read("valve-1")).toMatchObject({ actuator: "valve-1", online: true });
    } finally {
      await plc.close();
    }
    expect(daemon.logs.filter((l) => l.msg === "MQTT broker unreachable; reconnecting")).toEqual([]);
    expect(daemon.logs.filter((l) => l.msg === "MQTT connected")).toHaveLength(1);
  });

  it("a controller cannot log in on the gateways' listener", async () => {
    await expect(mqtt.connectAsync({ ...brokerAddress(gatewaysUrl), ...rawOptions("plc-a", "fencegate-test") })).rejects.toThrow(
      /not authorized|bad user name or password/i,
    );
  });
});
