/**
 * Several gateways on one broker and one base topic, as a plant runs them: gw-base serves
 * valve-1, gw-auth serves valve-a. Real daemons, real Mosquitto, simulated valves.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FencegateClient, FencegateError } from "fencegate-client";
import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startSimulator } from "../../../firmware-bridge/src/simulator.ts";
import { actuatorConflictOf } from "../../../src/adapters/mqtt/presence.ts";
import { runDoctor } from "../../../src/doctor/checks.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { runFencegate } from "../../support/processes.ts";
import { Teardown, stopDaemon } from "../../support/stack.ts";

const teardown = new Teardown();
let broker: Broker;

interface Gateway {
  readonly dir: string;
  readonly config: Record<string, unknown>;
  readonly file: string;
}

/** A gateway's installation: its own directory, journal and simulated valve (unit 1). */
async function installation(gatewayId: string, actuators: readonly string[], extra: Record<string, unknown> = {}): Promise<Gateway> {
  const dir = teardown.add(mkdtempSync(join(tmpdir(), `fencegate-several-${gatewayId}-`)), (d) =>
    rmSync(d, { recursive: true, force: true }),
  );
  const units = actuators.map((_, i) => i + 1);
  const sim = teardown.add(await startSimulator({ units, rate: 0, profile: "fenced", tcp: { host: "127.0.0.1", port: 0 } }), (s) =>
    s.close(),
  );
  const config = {
    ...gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { sim: { type: "tcp", ...sim.tcp! } },
      actuators: actuators.map((a, i) => valve(a, "sim", i + 1)),
    }),
    gatewayId,
    ...extra,
  };
  const file = join(dir, "gateway.yaml");
  writeFileSync(file, stringify(config));
  return { dir, config, file };
}

async function started(g: Gateway, actuators: readonly string[]): Promise<DaemonProcess> {
  const daemon = teardown.add(DaemonProcess.start(g.dir, g.config), (d) => stopDaemon(d));
  await daemon.ready(actuators);
  return daemon;
}

let base: Gateway;
let auth: Gateway;
let baseDaemon: DaemonProcess;

beforeAll(async () => {
  broker = teardown.add(await startMosquitto(), (b) => b.stop());
  base = await installation("gw-base", ["valve-1"]);
  auth = await installation("gw-auth", ["valve-a"]);
  baseDaemon = await started(base, ["valve-1"]);
  await started(auth, ["valve-a"]);
});
afterAll(() => teardown.run());

/** Every reply that comes to one request within `waitMs`, in order. */
async function allReplies(actuator: string, verb: string, body: Record<string, unknown>, waitMs = 1500): Promise<Record<string, any>[]> {
  const client = await mqtt.connectAsync(broker.url, { protocolVersion: 5, clientId: `several-${randomUUID().slice(0, 8)}` });
  try {
    const replyTopic = `test/replies/${randomUUID()}`;
    const replies: Record<string, any>[] = [];
    client.on("message", (_t, payload) => replies.push(JSON.parse(payload.toString())));
    await client.subscribeAsync(replyTopic, { qos: 1 });
    const id = randomUUID();
    await client.publishAsync(`fencegate/${actuator}/${verb}`, JSON.stringify({ id, ...body }), {
      qos: 1,
      properties: { responseTopic: replyTopic, correlationData: Buffer.from(id) },
    });
    await new Promise((r) => setTimeout(r, waitMs));
    return replies;
  } finally {
    await client.endAsync(true);
  }
}

describe("several gateways on one broker", () => {
  it("a request gets one reply, from the gateway serving its actuator; the other gateway does not answer it", async () => {
    const acquired = await allReplies("valve-1", "lease/acquire", { holder: "line-a", ttlMs: 5000 });
    expect(acquired).toHaveLength(1);
    expect(acquired[0]).toMatchObject({ ok: true, lease: { holder: "line-a" } });
    const token = acquired[0]!.lease.token as number;
    const commanded = await allReplies("valve-1", "command", { holder: "line-a", token, seq: 1, set: { position: 42 } });
    expect(commanded).toHaveLength(1);
    expect(commanded[0]).toMatchObject({ ok: true, applied: { position: 42 } });
    const read = await allReplies("valve-a", "read", { holder: "line-a" });
    expect(read).toHaveLength(1);
    expect(read[0]).toMatchObject({ ok: true, state: { actuator: "valve-a", gateway: "gw-auth" } });
    await allReplies("valve-1", "lease/release", { holder: "line-a", token });
  });

  it("the client library takes the serving gateway's answer, and says UNKNOWN_ACTUATOR within two seconds for an actuator no gateway announces", async () => {
    const client = await FencegateClient.connect({ url: broker.url, holder: "line-b" });
    try {
      const lease = await client.acquire("valve-1", { ttlMs: 5000 });
      await lease.command({ position: 17 });
      await lease.release();
      const askedAt = performance.now();
      const refusal = await client.read("valve-9").catch((err: unknown) => err);
      expect(performance.now() - askedAt).toBeLessThan(2000);
      expect(refusal).toBeInstanceOf(FencegateError);
      expect((refusal as FencegateError).code).toBe("UNKNOWN_ACTUATOR");
      expect((refusal as FencegateError).message).toMatch(
        /^UNKNOWN_ACTUATOR: No gateway on this broker serves an actuator "valve-9": 2 gateway\(s\) announce theirs \((gw-base, gw-auth|gw-auth, gw-base)\)/,
      );
    } finally {
      await client.close();
    }
  });

  it("the CLI: an acquire on another gateway's actuator is granted (exit 0); an actuator nobody serves is 'no such actuator' (exit 5)", async () => {
    const cli = (...args: string[]) => runFencegate([...args, "--broker", broker.url, "--holder", "line-c"]);
    const granted = await cli("lease", "acquire", "valve-a", "--ttl-ms", "1000", "--json");
    expect(granted).toMatchObject({ code: 0 });
    expect(JSON.parse(granted.stdout)).toMatchObject({ ok: true, actuator: "valve-a", holder: "line-c" });
    const unknown = await cli("read", "valve-9");
    expect(unknown.code).toBe(5);
    expect(unknown.stderr).toMatch(/^UNKNOWN_ACTUATOR: No gateway on this broker serves an actuator "valve-9"/);
  });
});

describe("two gateways serving one actuator id", () => {
  it("a gateway refuses to start (exit 78) beside an online gateway that serves one of its actuator ids, naming both", async () => {
    const copy = await installation("gw-copy", ["valve-1", "valve-2"]);
    const daemon = teardown.add(DaemonProcess.start(copy.dir, copy.config), (d) => d.kill("SIGKILL"));
    expect(await daemon.exited).toEqual({ code: 78, signal: null });
    const fatal = daemon.logs.find((l) => l.level === 60);
    expect(fatal?.msg).toMatch(
      new RegExp(
        `^Gateway "gw-base" \\(host \\S+, pid ${baseDaemon.child.pid}\\) on ${broker.url} already serves "valve-1", which gateway "gw-copy" serves too`,
      ),
    );
    expect(daemon.logs.some((l) => l.msg === "MQTT connected")).toBe(false);
    // The running one was not disturbed.
    expect(await allReplies("valve-1", "read", { holder: "line-a" })).toHaveLength(1);
  });

  it("doctor fails for it, naming both, and says how many gateways it saw; for a gateway of its own it passes", async () => {
    const copy = await installation("gw-copy2", ["valve-1"]);
    const findings = await runDoctor(copy.file);
    expect(findings.find((f) => f.check === "actuator ids")).toMatchObject({
      status: "fail",
      message: expect.stringMatching(
        /^Gateway "gw-base" \(host \S+, pid \d+\) on \S+ already serves "valve-1", which gateway "gw-copy2" serves too/,
      ),
    });
    expect(findings.find((f) => f.check === "gateway id")).toMatchObject({
      status: "ok",
      message: expect.stringMatching(/\(2 gateways answered: gw-auth, gw-base\)/),
    });
    const own = await runDoctor(base.file);
    expect(own.find((f) => f.check === "actuator ids")).toMatchObject({
      status: "ok",
      message: "No other gateway serves an actuator of this one (2 gateways answered: gw-auth, gw-base).",
    });
  });

  it("members of one gateway group are no conflict", () => {
    const self = { id: "gw-b", instance: "b", host: "h", pid: 2, actuators: ["valve-1"], group: "boilers" };
    const member = { id: "gw-a", instance: "a", host: "h", pid: 1, actuators: ["valve-1"], group: "boilers" };
    expect(actuatorConflictOf({ kind: "answered", gateways: [member] }, self)).toBeUndefined();
    expect(actuatorConflictOf({ kind: "answered", gateways: [{ ...member, group: "other" }] }, self)).toMatchObject({
      actuators: ["valve-1"],
    });
  });
});
