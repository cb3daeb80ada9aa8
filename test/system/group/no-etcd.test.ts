/**
 * A first-hour path: a gateway configured for a group whose etcd is not there (a wrong
 * address, etcd not started yet). It starts, stands by (opens no bus, answers nothing),
 * says why once, not four times a second, and keeps trying.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../../src/config/parse.ts";
import { checkGroup } from "../../../src/doctor/checks.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { freePort } from "../../support/ports.ts";
import { stopDaemon } from "../../support/stack.ts";
import { TopicWatcher } from "../../support/watch.ts";

let dir: string;
let broker: Broker;
let daemon: DaemonProcess | undefined;
let watcher: TopicWatcher;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-no-etcd-"));
  broker = await startMosquitto();
  watcher = await TopicWatcher.connect(broker.url, ["fencegate/gateway/gw-a/status"]);
});

afterAll(async () => {
  if (daemon) await stopDaemon(daemon);
  await watcher?.close();
  await broker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("a group member without etcd", () => {
  it("stands by, opens no bus, says why once and keeps trying", async () => {
    const etcdPort = await freePort(); // nothing listens there
    const devicePort = await freePort(); // nor here: a bus opened by mistake would log its failure
    daemon = DaemonProcess.start(dir, {
      ...gatewayConfig({
        brokerUrl: broker.url,
        journalPath: join(dir, "journal.db"),
        buses: { plc: { type: "tcp", host: "127.0.0.1", port: devicePort } },
        actuators: [valve("valve-1", "plc", 1)],
      }),
      gatewayId: "gw-a",
      group: {
        name: "lonely",
        endpoints: [`http://127.0.0.1:${etcdPort}`],
        leaseTtlMs: 2000,
        selfFenceMarginMs: 500,
        requestTimeoutMs: 500,
        etcdElectionTimeoutMs: 100,
      },
    });
    await watcher.waitFor((m) => m.payload === "standby", { timeoutMs: 15_000, what: "status standby" });
    const first = await daemon.waitForLog(
      (l) => l.msg === "etcd lease grant failed; retrying" && l.level === 40,
      10_000,
      "the grant failure",
    );
    expect(first.err.message).toContain(`127.0.0.1:${etcdPort}`);
    await new Promise((r) => setTimeout(r, 2000)); // several retries
    expect(daemon.logs.filter((l) => l.msg === "etcd lease grant failed; retrying").length).toBeGreaterThan(3);
    expect(daemon.logs.filter((l) => l.msg === "etcd lease grant failed; retrying" && l.level === 40)).toHaveLength(1);
    expect(daemon.logs.some((l) => l.msg === "bus open" || l.msg === "cannot open the bus; retrying")).toBe(false);
    expect(daemon.child.exitCode).toBeNull();
  });

  it("a second gateway with the standby's gatewayId is refused: the standby still says who it is", async () => {
    const copy = mkdtempSync(join(tmpdir(), "fencegate-no-etcd-copy-"));
    let second: DaemonProcess | undefined;
    try {
      second = DaemonProcess.start(copy, {
        ...gatewayConfig({
          brokerUrl: broker.url,
          journalPath: join(copy, "journal.db"),
          buses: { plc: { type: "tcp", host: "127.0.0.1", port: 1 } },
          actuators: [valve("valve-1", "plc", 1)],
        }),
        gatewayId: "gw-a",
      });
      expect(await second.exited).toEqual({ code: 78, signal: null });
      expect(second.logs.find((l) => l.level === 60)?.msg).toMatch(/^Another fencegate with gatewayId "gw-a" is connected/);
      expect(watcher.last("fencegate/gateway/gw-a/status")?.payload).toBe("standby");
    } finally {
      await second?.kill("SIGKILL");
      rmSync(copy, { recursive: true, force: true });
    }
  });

  it("fencegate doctor says etcd does not answer, and what to check", async () => {
    const etcdPort = await freePort();
    const finding = await checkGroup(
      parseConfig({
        ...gatewayConfig({
          brokerUrl: broker.url,
          journalPath: join(dir, "j.db"),
          buses: { plc: { type: "tcp", host: "127.0.0.1" } },
          actuators: [valve("valve-1", "plc", 1)],
        }),
        group: { name: "lonely", endpoints: [`http://127.0.0.1:${etcdPort}`], requestTimeoutMs: 500 },
      }).group!,
    );
    expect(finding).toMatchObject({ check: "group etcd", status: "fail" });
    expect(finding.message).toContain(`ECONNREFUSED 127.0.0.1:${etcdPort}`);
    expect(finding.fix).toMatch(/etcdctl endpoint health --cluster/);
  });
});
