/**
 * The systemd side of a deployment: the unit file passes `systemd-analyze verify`, and the
 * real daemon speaks sd_notify (READY=1, WATCHDOG=1 pings, STOPPING=1) to a notify socket
 * the way systemd would see it, only while it is healthy.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { SystemdNotifier, watchdogIntervalMs } from "../../../src/adapters/systemd/notify.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { runToolSync } from "../../support/processes.ts";
import { Teardown } from "../../support/stack.ts";
import { openNotifySocket, type NotifySocket } from "./notify-socket.ts";

const UNIT = resolve(import.meta.dirname, "../../../config/fencegate.service");
const teardown = new Teardown();
let dir: string;

beforeAll(() => {
  dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-systemd-")), (d) => rmSync(d, { recursive: true, force: true }));
});
afterAll(() => teardown.run());

describe("config/fencegate.service", () => {
  it("passes systemd-analyze verify without a single warning", () => {
    // verify also checks that ExecStart's program exists; where Node is not /usr/bin/node
    // (a CI image with /usr/local/bin/node), check a copy that names this machine's node.
    let unit = UNIT;
    if (!existsSync("/usr/bin/node")) {
      unit = join(dir, "fencegate.service");
      writeFileSync(unit, readFileSync(UNIT, "utf8").replace("ExecStart=/usr/bin/node ", `ExecStart=${process.execPath} `));
    }
    const run = runToolSync("systemd-analyze", ["verify", "--man=no", unit]);
    expect(run.error).toBeUndefined();
    // Unknown keys and bad values are only warnings (exit 0): any output is a failure here.
    expect({ status: run.code, output: run.stdout + run.stderr }).toEqual({ status: 0, output: "" });
  });

  it("explains its settings by what the package ships (dist/), not by tsx, which it does not ship", () => {
    expect(readFileSync(UNIT, "utf8")).not.toMatch(/tsx/i);
    const deploy = readFileSync(resolve(import.meta.dirname, "../../../docs/deploy.md"), "utf8");
    const explaining = deploy.split(/\n\s*\n|\n(?=- )/).filter((paragraph) => /PrivateTmp|TimeoutStartSec/.test(paragraph));
    expect(explaining.length).toBeGreaterThan(0);
    expect(explaining.filter((paragraph) => /tsx/i.test(paragraph))).toEqual([]);
  });

  it("runs as fencegate in dialout, notifies with a watchdog, and keeps the journal in its state directory", () => {
    const text = readFileSync(UNIT, "utf8");
    for (const line of [
      "User=fencegate",
      "SupplementaryGroups=dialout",
      "Type=notify",
      "NotifyAccess=all",
      "StateDirectory=fencegate",
      "ProtectSystem=strict",
      "CapabilityBoundingSet=",
      "NoNewPrivileges=yes",
      "Restart=always",
    ]) {
      expect(text.split("\n")).toContain(line);
    }
    expect(text).toMatch(/^WatchdogSec=\d+s$/m);
    expect(text).toContain("--config /etc/fencegate/gateway.yaml");
  });
});

describe("the watchdog interval", () => {
  it("is a third of WATCHDOG_USEC, and only for the process WATCHDOG_PID names", () => {
    expect(watchdogIntervalMs({ NOTIFY_SOCKET: "/run/x", WATCHDOG_USEC: "30000000" }, 42)).toBe(10_000);
    expect(watchdogIntervalMs({ NOTIFY_SOCKET: "/run/x", WATCHDOG_USEC: "30000000", WATCHDOG_PID: "42" }, 42)).toBe(10_000);
    expect(watchdogIntervalMs({ NOTIFY_SOCKET: "/run/x", WATCHDOG_USEC: "30000000", WATCHDOG_PID: "7" }, 42)).toBeNull();
    expect(watchdogIntervalMs({ NOTIFY_SOCKET: "/run/x" }, 42)).toBeNull();
    expect(watchdogIntervalMs({ WATCHDOG_USEC: "30000000" }, 42)).toBeNull();
    expect(watchdogIntervalMs({ NOTIFY_SOCKET: "/run/x", WATCHDOG_USEC: "soon" }, 42)).toBeNull();
  });
});

describe("pings through systemd-notify", () => {
  let socket: NotifySocket;
  beforeAll(async () => {
    socket = teardown.add(await openNotifySocket(mkdtempSync(join(dir, "n-"))), (s) => s.close());
  });

  it("stop while the health check reports a problem and resume when it clears", async () => {
    const notifier = SystemdNotifier.fromEnvironment({
      log: pino({ level: "silent" }),
      env: { NOTIFY_SOCKET: socket.path, WATCHDOG_USEC: "150000" },
    })!;
    let problem: string | null = "the journal failed";
    expect(notifier.startWatchdog(() => problem)).toBe(true);
    try {
      await new Promise((r) => setTimeout(r, 400)); // eight intervals of 50 ms
      expect(socket.messages.filter((m) => m.includes("WATCHDOG=1"))).toEqual([]);
      problem = null;
      await socket.waitFor("WATCHDOG=1", 5000);
    } finally {
      notifier.stopWatchdog();
    }
  });
});

describe("the notifier's relay", () => {
  it("answers each notification in order, and one failing systemd-notify is warned about once with its output", async () => {
    const warnings: unknown[] = [];
    const log = pino({ level: "warn" }, { write: (line: string) => warnings.push(JSON.parse(line)) });
    const failing = join(mkdtempSync(join(dir, "f-")), "systemd-notify");
    writeFileSync(failing, '#!/bin/sh\n[ "$1" = "WATCHDOG=1" ] && exit 0\necho "refused: $*" >&2\nexit 1\n', { mode: 0o755 });
    const notifier = SystemdNotifier.fromEnvironment({ log, env: { NOTIFY_SOCKET: "/nonexistent" }, command: failing })!;
    const answers = await Promise.all([
      notifier.send(["WATCHDOG=1"]),
      notifier.send(["READY=1", "STATUS=serving 2 actuator(s)"]),
      notifier.send(["WATCHDOG=1"]),
      notifier.send(["STOPPING=1"]),
    ]);
    expect(answers).toEqual([true, false, true, false]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ err: expect.stringContaining("refused: READY=1 STATUS=serving 2 actuator(s)") });
    await notifier.stopping();
  });
});

describe("the daemon under a notify socket", () => {
  let broker: Broker;
  let sim: SimulatorHandle;
  let socket: NotifySocket;
  let daemon: DaemonProcess;

  beforeAll(async () => {
    broker = teardown.add(await startMosquitto(), (b) => b.stop());
    sim = teardown.add(await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1], rate: 0 }), (s) => s.close());
    socket = teardown.add(await openNotifySocket(mkdtempSync(join(dir, "d-"))), (s) => s.close());
    const config = gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { sim: { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 500 } },
      actuators: [valve("valve-1", "sim", 1)],
    });
    // The child inherits the environment at spawn: set it for this one spawn only.
    const saved = { ...process.env };
    Object.assign(process.env, { NOTIFY_SOCKET: socket.path, WATCHDOG_USEC: "600000" });
    try {
      daemon = teardown.add(DaemonProcess.start(dir, config), (d) => d.kill());
    } finally {
      delete process.env.NOTIFY_SOCKET;
      delete process.env.WATCHDOG_USEC;
      Object.assign(process.env, saved);
    }
    await daemon.ready(["valve-1"], 30_000);
  });

  it("says READY=1 with a status, then pings WATCHDOG=1 every WatchdogSec/3", async () => {
    await socket.waitFor("READY=1");
    const ready = socket.messages.find((m) => m.includes("READY=1"))!;
    expect(ready.some((l) => l.startsWith("STATUS=serving 1 actuator(s)"))).toBe(true);
    const before = socket.messages.filter((m) => m.includes("WATCHDOG=1")).length;
    await new Promise((r) => setTimeout(r, 2000)); // ten intervals of 200 ms
    const pings = socket.messages.filter((m) => m.includes("WATCHDOG=1")).length - before;
    // At most one ping per interval; fewer when a ping's systemd-notify is still running
    // (a loaded machine), but a few must get through.
    expect(pings).toBeGreaterThanOrEqual(3);
    expect(pings).toBeLessThanOrEqual(11);
  });

  it("says STOPPING=1 on SIGTERM and exits 0", async () => {
    const exited = await daemon.kill("SIGTERM");
    expect(exited.code).toBe(0);
    const stopping = socket.messages.findIndex((m) => m.includes("STOPPING=1"));
    expect(stopping).toBeGreaterThan(0);
    // No ping after STOPPING=1: systemd must not take a draining daemon for a healthy one.
    expect(socket.messages.slice(stopping + 1).filter((m) => m.includes("WATCHDOG=1"))).toEqual([]);
  });
});
