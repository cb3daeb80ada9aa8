/**
 * The test support's metrics port for a daemon: a port found free and then taken before the
 * daemon binds it (here on purpose) makes the daemon exit naming metrics.port; only then is
 * another port drawn, and the daemon started again on it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { stopDaemon } from "../../support/stack.ts";

const dir = mkdtempSync(join(tmpdir(), "fencegate-metrics-port-"));
const intruder = net.createServer();
let daemon: DaemonProcess | undefined;
afterAll(async () => {
  if (daemon) await stopDaemon(daemon);
  await new Promise((resolve) => intruder.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

it("draws another metrics port when the daemon's own bind finds the drawn one taken", async () => {
  const drawn: number[] = [];
  const started = await DaemonProcess.startOnFreeMetricsPort(dir, (metricsPort) => {
    drawn.push(metricsPort);
    if (drawn.length === 1) intruder.listen(metricsPort, "127.0.0.1"); // taken before the daemon is up
    // Nothing listens on port 1: the daemon starts (and binds its metrics) without broker or device.
    return gatewayConfig({
      brokerUrl: "mqtt://127.0.0.1:1",
      journalPath: join(dir, "journal.db"),
      buses: { dev: { type: "tcp", host: "127.0.0.1", port: 1 } },
      actuators: [valve("valve-1", "dev", 1, "plain")],
      metricsPort,
    });
  });
  daemon = started.daemon;
  expect(drawn).toHaveLength(2);
  expect(started.metricsPort).toBe(drawn[1]);
  expect((await fetch(`http://127.0.0.1:${started.metricsPort}/healthz`)).status).toBeLessThan(600);
});
