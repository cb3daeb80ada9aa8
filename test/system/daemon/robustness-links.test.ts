/**
 * The daemon's two links going away and coming back, without restarting the daemon:
 * the MQTT broker (killed and restarted on the same port) and the serial adapter (the
 * socat pty pair killed, then made again at the same paths). Real Mosquitto, the real
 * daemon process, the simulated fenced actuator over Modbus RTU on a real pty.
 * Last: the daemon SIGKILLed, and the broker publishing its last will.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPtyPair, type PtyPair } from "../../../firmware-bridge/src/pty.ts";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { TestController } from "../../support/controller.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { TopicWatcher, until } from "../../support/watch.ts";

const A = "valve-1";
const STATUS_TOPIC = "fencegate/gateway/test/status";
const STATE_TOPIC = `fencegate/${A}/state`;

let dir: string;
let ptyDir: string;
let broker: Broker | undefined;
let pty: PtyPair | undefined;
let sim: SimulatorHandle | undefined;
let daemon: DaemonProcess | undefined;
let ctl: TestController | undefined;
let watcher: TopicWatcher | undefined;
let config: Record<string, unknown>;
let token = 0;
let seq = 0;

async function startSim(): Promise<SimulatorHandle> {
  // The EEPROM lives in a file: the same physical device before and after the adapter is re-plugged.
  sim = await startSimulator({ serial: { path: pty!.device }, units: [1], rate: 0, stateFile: join(dir, "eeprom.json") });
  return sim;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-links-"));
  ptyDir = join(dir, "tty");
  mkdirSync(ptyDir);
  broker = await startMosquitto();
  pty = await createPtyPair({ dir: ptyDir });
  await startSim();
  config = gatewayConfig({
    brokerUrl: broker.url,
    journalPath: join(dir, "journal.db"),
    buses: { line: { type: "rtu", path: pty.master, timeoutMs: 300, reconnect: { minMs: 100, maxMs: 400 } } },
    actuators: [valve(A, "line", 1)],
    mqtt: { reconnect: { minMs: 100, maxMs: 400 } },
  });
  daemon = DaemonProcess.start(dir, config);
  await daemon.ready([A]);
  ctl = await TestController.connect(broker.url, "controller");
  watcher = await TopicWatcher.connect(broker.url, [STATUS_TOPIC, STATE_TOPIC]);
  const lease = await ctl.acquire(A, 60_000);
  expect(lease.ok).toBe(true);
  token = lease.lease.token;
});

afterAll(async () => {
  await daemon?.kill("SIGKILL");
  await Promise.allSettled([ctl?.close(), watcher?.close()]);
  await sim?.close();
  await pty?.close();
  await broker?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function command(position: number) {
  return ctl!.command(A, token, seq++, { position });
}

describe("the MQTT broker killed and restarted on the same port", () => {
  it("is reconnected by the daemon itself: online and the states republished retained, commands work again", async () => {
    expect(await command(11)).toMatchObject({ ok: true, outcome: "applied" });
    const connects = () => daemon!.logs.filter((l) => l.msg === "MQTT connected").length;
    const before = connects();
    const statusFrom = watcher!.messages.length;

    await broker!.kill();
    await daemon!.waitForLog((l) => l.msg === "MQTT broker unreachable; reconnecting", 5000, "the broker loss");
    await broker!.start(); // same port; no persistence: every retained message is gone
    await until(() => connects() > before, { what: "the daemon's reconnection" });
    expect(daemon!.child.exitCode).toBe(null);

    // The watcher (reconnected by itself) sees online again: the broker holds it from now on.
    await watcher!.waitFor((m) => m.topic === STATUS_TOPIC && m.payload === "online", { from: statusFrom, what: "online again" });
    // A newcomer gets the retained status and state the daemon republished on reconnecting.
    const late = await TopicWatcher.connect(broker!.url, [STATUS_TOPIC, STATE_TOPIC]);
    try {
      expect(await late.waitFor((m) => m.topic === STATUS_TOPIC, { what: "the retained status" })).toMatchObject({
        payload: "online",
        retain: true,
      });
      const state = await late.waitFor((m) => m.topic === STATE_TOPIC, { what: "the retained state" });
      expect(state.retain).toBe(true);
      expect(JSON.parse(state.payload)).toMatchObject({
        actuator: A,
        online: true,
        lease: { holder: "controller", token },
        points: { position: 11 },
      });
    } finally {
      await late.close();
    }

    // The lease lived on in the daemon; the controller reconnected by itself too.
    await until(() => ctl!.client.connected, { what: "the controller's reconnection" });
    expect(await command(22)).toMatchObject({ ok: true, outcome: "applied", applied: { position: 22 } });
    expect(sim!.device(1).targetPosition).toBe(22);
  });
});

describe("the serial adapter unplugged and plugged back in", () => {
  it("fails commands fast with DEVICE_UNAVAILABLE, shows online:false, keeps running, and recovers by itself", async () => {
    expect(await command(33)).toMatchObject({ ok: true, outcome: "applied" });
    const from = watcher!.messages.length;

    // Unplugged while a command is at the device, its answer not yet on the line.
    sim!.setDelay(200);
    const applied = sim!.device(1).applied.length;
    const inFlight = { seq, reply: command(34) };
    await until(() => sim!.device(1).applied.length > applied, { everyMs: 0, what: "the command at the device" });
    await pty!.close();
    // It may have acted (it did): not DEVICE_UNAVAILABLE, not applied, but unknown.
    expect(await inFlight.reply).toMatchObject({ ok: false, error: { code: "OUTCOME_UNKNOWN" } });
    await watcher!.waitForJson(STATE_TOPIC, (s) => s.online === false, { from, what: "state online:false" });
    const offlineSeen = watcher!.messages.length; // states are published in order: any online:true after this is the recovery

    const started = performance.now();
    const refused = await command(44);
    expect(refused).toMatchObject({ ok: false, error: { code: "DEVICE_UNAVAILABLE" } });
    expect(performance.now() - started).toBeLessThan(1000);

    // It keeps trying to reopen the port, with backoff, and does not exit.
    await until(() => daemon!.logs.filter((l) => l.msg === "cannot open the bus; retrying").length >= 3, { what: "reopen attempts" });
    const delays = daemon!.logs.filter((l) => l.msg === "cannot open the bus; retrying").map((l) => l.retryInMs as number);
    expect(delays.slice(0, 3)).toEqual([...delays.slice(0, 3)].sort((x, y) => x - y));
    expect(Math.max(...delays)).toBeLessThanOrEqual(400);
    // Said once, with what to check: not serialport's "Error: Error: ...".
    expect(daemon!.logs.find((l) => l.msg === "cannot open the bus; retrying")).toMatchObject({
      err: expect.stringMatching(/^No such file or directory, cannot open /),
      hint: expect.stringContaining("No such device: check buses."),
    });
    expect(daemon!.child.exitCode).toBe(null);

    // Plugged back in: the same link paths, the same device.
    await sim!.close();
    pty = await createPtyPair({ dir: ptyDir });
    await startSim();
    const state = await watcher!.waitForJson(STATE_TOPIC, (s) => s.online === true, {
      from: offlineSeen,
      timeoutMs: 5000,
      what: "state online:true",
    });
    expect(state).toMatchObject({ lease: { holder: "controller", token } });
    const after = await command(55);
    expect(after, JSON.stringify(after)).toMatchObject({ ok: true, outcome: "applied", applied: { position: 55 } });
    expect(sim!.device(1)).toMatchObject({ targetPosition: 55, fence: { token } });
    // The command cut off at the device is on record with that outcome.
    const retry = await ctl!.command(A, token, inFlight.seq, { position: 34 });
    expect(retry).toMatchObject({ ok: false, error: { code: "DUPLICATE", original: { ok: false, error: { code: "OUTCOME_UNKNOWN" } } } });
    expect(daemon!.child.exitCode).toBe(null);
  });
});

describe("the daemon SIGKILLed", () => {
  it("is announced offline by the broker's last will, retained", async () => {
    const from = watcher!.messages.length;
    await daemon!.kill("SIGKILL");
    expect(await watcher!.waitFor((m) => m.topic === STATUS_TOPIC, { from, what: "the last will" })).toMatchObject({ payload: "offline" });
    const late = await TopicWatcher.connect(broker!.url, [STATUS_TOPIC]);
    try {
      expect(await late.waitFor((m) => m.topic === STATUS_TOPIC, { what: "the retained status" })).toMatchObject({
        payload: "offline",
        retain: true,
      });
    } finally {
      await late.close();
    }
  });
});

describe("SIGTERM while the broker is down", () => {
  it("drains and exits 0 without waiting for the broker, also with messages it never acknowledged", async () => {
    await daemon?.kill("SIGKILL"); // (already gone when the tests before ran)
    daemon = DaemonProcess.start(dir, config);
    await daemon.ready([A]);
    // Freeze the broker (connections stay up, nothing is acknowledged), make the daemon
    // publish (the unit stops answering: state online:false), then kill the broker: the
    // daemon is left with a QoS 1 message the broker will never acknowledge.
    broker!.signal("SIGSTOP");
    try {
      sim!.mute(true);
      await daemon.waitForLog((l) => l.msg === "unit not answering", 5000, "the unit going offline");
    } finally {
      await broker!.kill();
      sim!.mute(false);
    }
    await daemon.waitForLog((l) => l.msg === "MQTT broker unreachable; reconnecting", 5000, "the broker loss");
    const started = performance.now();
    expect(await daemon.kill("SIGTERM")).toEqual({ code: 0, signal: null });
    expect(performance.now() - started).toBeLessThan(3000);
    await until(() => daemon!.logs.some((l) => l.msg === "fencegate daemon stopped"), { what: "the daemon's last log line" });
  });
});
