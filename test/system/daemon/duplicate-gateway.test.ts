/**
 * Two daemons with the same gatewayId (both copied
 * from one configuration) kept taking each other's MQTT client id, both logged "broker
 * unreachable", both answered for the same actuators; neither the daemon nor doctor
 * noticed. Real daemons, real Mosquitto (which disconnects the older connection when a
 * newer one takes its client id), the simulated valve.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { runDoctor } from "../../../src/doctor/checks.ts";
import { DaemonProcess } from "../../support/daemon.ts";
import { Teardown, startValveStack, stopDaemon, type ValveStack } from "../../support/stack.ts";

const A = "valve-1";
const teardown = new Teardown();
let world: ValveStack;

beforeAll(async () => {
  world = await startValveStack(teardown, { name: "dup", id: A });
});
afterAll(() => teardown.run());

/** The same configuration in a directory (and journal) of its own: a copied installation. */
function copiedInstallation(): { dir: string; config: Record<string, unknown>; file: string } {
  const dir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-dup-copy-")), (d) => rmSync(d, { recursive: true, force: true }));
  const config = { ...world.config, journal: { path: join(dir, "journal.db"), createIfMissing: true } };
  const file = join(dir, "gateway.yaml");
  writeFileSync(file, stringify(config));
  return { dir, config, file };
}

describe("a second gateway with the same gatewayId is detected and refused", () => {
  it("a newcomer asks before it takes the client id: exit 78 with a sentence naming the id; the running one keeps serving", async () => {
    const copy = copiedInstallation();
    const second = teardown.add(DaemonProcess.start(copy.dir, copy.config), (d) => d.kill("SIGKILL"));
    expect(await second.exited).toEqual({ code: 78, signal: null });
    const fatal = second.logs.find((l) => l.level === 60);
    expect(fatal?.msg).toMatch(
      new RegExp(
        `^Another fencegate with gatewayId "test" is connected to ${world.broker.url} \\(host \\S+, pid ${world.daemon.child.pid}\\): two gateways with one id take each other's MQTT client id`,
      ),
    );
    expect(second.logs.some((l) => l.msg === "MQTT connected")).toBe(false);
    // The first never lost its connection.
    expect(await world.ctl.read(A)).toMatchObject({ ok: true, state: { actuator: A, online: true } });
    expect(world.daemon.logs.some((l) => l.msg === "MQTT broker unreachable; reconnecting")).toBe(false);
  });

  it("doctor: the daemon of this configuration is found running; a copy elsewhere with the same id fails", async () => {
    const own = (await runDoctor(join(world.dir, "gateway.yaml"))).find((f) => f.check === "gateway id");
    expect(own).toMatchObject({
      status: "ok",
      message: expect.stringMatching(/^The daemon of this configuration is running \(host \S+, pid \d+\)/),
    });
    const copied = (await runDoctor(copiedInstallation().file)).find((f) => f.check === "gateway id");
    expect(copied).toMatchObject({
      status: "fail",
      message: expect.stringMatching(/^Another fencegate with gatewayId "test" is connected to/),
      fix: expect.stringContaining("its own gatewayId"),
    });
  });

  it("a newcomer that could not see the running one takes the id anyway: of the two, exactly one stays, the other stops saying why", async () => {
    // Frozen, the running daemon cannot answer the newcomer's question (its connection stays
    // up, so the broker still says online): the newcomer waits, hears nothing, connects, and
    // the broker closes the older connection (Mosquitto 2.0 without saying why).
    world.daemon.child.kill("SIGSTOP");
    const copy = copiedInstallation();
    const second = teardown.add(DaemonProcess.start(copy.dir, copy.config), (d) => stopDaemon(d));
    try {
      await second.waitForLog((l) => l.msg === "MQTT connected", 15_000, "the newcomer connected");
    } finally {
      world.daemon.child.kill("SIGCONT");
    }
    const stopped = await Promise.race([world.daemon.exited.then(() => world.daemon), second.exited.then(() => second)]);
    const stays = stopped === world.daemon ? second : world.daemon;
    expect(await stopped.exited).toEqual({ code: 78, signal: null });
    const fatal = stopped.logs.find((l) => l.level === 60);
    expect(fatal?.msg).toMatch(
      /^(The broker gave this gateway's MQTT client id "fencegate-test" to another connection: another fencegate with gatewayId "test" has it \(host \S+, pid \d+\)|Another fencegate with gatewayId "test" is connected)/,
    );
    // The other stays connected and serving; the id is not taken back and forth.
    await new Promise((r) => setTimeout(r, 2500));
    expect(stays.child.exitCode).toBeNull();
    expect(await world.ctl.read(A)).toMatchObject({ ok: true, state: { actuator: A } });
    const lostAfter = stays.logs.filter((l) => l.msg === "MQTT broker unreachable; reconnecting").length;
    await new Promise((r) => setTimeout(r, 1500));
    expect(stays.logs.filter((l) => l.msg === "MQTT broker unreachable; reconnecting").length).toBe(lostAfter);
    world.daemon = stays;
  });
});
