/**
 * An actuator taken out of the configuration: nothing serves it any more, and its retained
 * state says so (offline, no lease, the journal's fence, a problem naming why) instead of
 * what its gateway last said. Never for an actuator another gateway on the broker serves.
 * Real daemons, real Mosquitto, the simulated valves.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator } from "../../../firmware-bridge/src/simulator.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { TestController } from "../../support/controller.ts";
import { Teardown, daemonReport, startStack, stopDaemon, type Stack } from "../../support/stack.ts";
import { TopicWatcher, retainedOn, safeJson } from "../../support/watch.ts";

const teardown = new Teardown();
let stack: Stack;
let ctl: TestController;
const stateOf = (actuator: string) => `fencegate/${actuator}/state`;

const retained = (topics: string[]) => retainedOn(stack.broker.url, topics);

const withActuators = (ids: readonly string[]) => ({
  ...stack.config,
  actuators: (stack.config.actuators as { id: string }[]).filter((a) => ids.includes(a.id)),
});

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "unserved",
    sim: () => ({ units: [1, 2, 3], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", ...sim } },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2), valve("valve-3", "sim", 3)],
    }),
    fenced: ["valve-1", "valve-2", "valve-3"],
  });
  ctl = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
}, 60_000);
afterAll(() => teardown.run());

describe("actuators no gateway serves", () => {
  it("an actuator taken out of the configuration reads offline with no lease, its journal's fence and why, after a crash left it leased", async () => {
    const grant = await ctl.acquire("valve-2", 60_000);
    expect(grant.ok, JSON.stringify(grant)).toBe(true);
    const token = (grant.lease as { token: number }).token;
    expect(await ctl.command("valve-2", token, 4, { position: 30 })).toMatchObject({ ok: true });
    // A grant's commit carries the audit records queued before it: the command's is durable
    // once valve-3's grant is replied (and valve-3 has a history here, for the next test).
    expect(await ctl.acquire("valve-3", 60_000)).toMatchObject({ ok: true });
    await stack.daemon.kill("SIGKILL"); // the retained state keeps saying online and leased

    const watch = teardown.add(await TopicWatcher.connect(stack.broker.url, [stateOf("valve-2")]), (w) => w.close());
    const daemon = teardown.add(DaemonProcess.start(stack.dir, withActuators(["valve-1", "valve-3"])), (d) => stopDaemon(d));
    await daemon.ready(["valve-1", "valve-3"]);
    const unserved = await watch.waitFor((m) => safeJson(m.payload)?.online === false, {
      what: "valve-2's state saying nothing serves it",
    });
    expect(safeJson(unserved.payload)).toEqual({
      actuator: "valve-2",
      online: false,
      lease: null,
      fence: { token, seq: 4 },
      points: {},
      at: expect.any(String),
      pointsAgeMs: null,
      gateway: "test",
      safeWrite: null,
      problem:
        "no gateway serves this actuator: its journal holds it, and it is not in the configuration of gateway test; requests to it get no reply. Add it to a gateway's configuration to serve it again.",
    });
    await stopDaemon(daemon);
  });

  it("an actuator moved to another gateway on the broker keeps that gateway's state", async () => {
    // valve-3 moves to gw-other (its own journal and device); then this gateway starts without it.
    const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-unserved-other-")), (d) => rmSync(d, { recursive: true, force: true }));
    const sim = teardown.add(await startSimulator({ units: [1], rate: 0, profile: "fenced", tcp: { host: "127.0.0.1", port: 0 } }), (s) =>
      s.close(),
    );
    const other = {
      ...gatewayConfig({
        brokerUrl: stack.broker.url,
        journalPath: join(dir, "journal.db"),
        buses: { sim: { type: "tcp", ...sim.tcp! } },
        actuators: [valve("valve-3", "sim", 1)],
      }),
      gatewayId: "gw-other",
    };
    const otherDaemon = teardown.add(DaemonProcess.start(dir, other), (d) => stopDaemon(d));
    await otherDaemon.ready(["valve-3"]).catch((err) => {
      throw new Error(`${err}\n${daemonReport(otherDaemon)}`);
    });

    const watch = teardown.add(
      await TopicWatcher.connect(stack.broker.url, [stateOf("valve-1"), stateOf("valve-2"), stateOf("valve-3")]),
      (w) => w.close(),
    );
    const daemon = teardown.add(DaemonProcess.start(stack.dir, withActuators(["valve-1"])), (d) => stopDaemon(d));
    await daemon.ready(["valve-1"]).catch((err) => {
      throw new Error(`${err}\n${daemonReport(daemon)}`);
    });
    await watch.waitFor((m) => m.topic === stateOf("valve-2") && safeJson(m.payload)?.online === false && !m.retain, {
      what: "valve-2's state saying nothing serves it",
    });
    // The clean stop's last states come after everything the gateway published before (one connection, in order).
    await stopDaemon(daemon);
    await watch.waitFor((m) => m.topic === stateOf("valve-1") && safeJson(m.payload)?.online === false && !m.retain, {
      what: "valve-1's state at the clean stop",
    });
    const fromTest = watch.messages.filter((m) => m.topic === stateOf("valve-3") && safeJson(m.payload)?.gateway === "test" && !m.retain);
    expect(fromTest).toEqual([]);
    expect(safeJson((await retained([stateOf("valve-3")])).get(stateOf("valve-3"))!)).toMatchObject({ online: true, gateway: "gw-other" });
    await stopDaemon(otherDaemon);
  });
});
