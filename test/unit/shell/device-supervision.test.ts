/**
 * Watching one device (src/shell/device-supervision.ts), on the simulator's clock: the
 * offline rule (unit not answering, a foreign device, two unusable polls in a row), the
 * regular poll, and one read-back once writes have paused, not one per write.
 */
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { DeviceSupervisor } from "../../../src/shell/device-supervision.ts";
import { DeviceAnswerError, DeviceMismatchError, type DevicePort } from "../../../src/shell/ports.ts";
import { World } from "../../../src/sim/world.ts";

type Answer = { position: number } | Error;

function setup(pollIntervalMs = 1_000) {
  const world = new World(10_000);
  const answers: Answer[] = [];
  let reads = 0;
  const device: DevicePort = {
    read: () => {
      reads++;
      const next = answers.shift() ?? { position: 1 };
      return next instanceof Error ? Promise.reject(next) : Promise.resolve(next);
    },
    write: () => Promise.reject(new Error("not written here")),
    readFence: () => Promise.resolve(null),
  };
  const told: string[] = [];
  const supervisor = new DeviceSupervisor(
    {
      actuator: "valve-1",
      device,
      pollIntervalMs,
      clock: world.clock,
      scheduler: world.schedulerFor((fn) => fn()),
      log: pino({ level: "silent" }),
    },
    {
      changed: (online) => told.push(online ? "online" : "offline"),
      answered: () => told.push("answered"),
      foreign: () => told.push("foreign"),
    },
  );
  return { world, supervisor, answers, told, reads: () => reads };
}

describe("device supervision", () => {
  it("counts the device online only while its unit answers, and says why not", () => {
    const { supervisor, told } = setup();
    expect(supervisor.online).toBe(false);
    supervisor.linkChanged(true, null);
    expect(supervisor.online).toBe(true);
    supervisor.linkChanged(false, "unit 1 on bus line does not answer");
    expect(supervisor.online).toBe(false);
    expect(supervisor.problem).toBe("unit 1 on bus line does not answer");
    expect(told).toEqual(["online", "offline"]);
  });

  it("reports the device offline after two unusable polls in a row, not one, and online again after a good one", async () => {
    const { supervisor, answers, told } = setup();
    supervisor.linkChanged(true, null);
    answers.push(new DeviceAnswerError("exception 0x04"), new DeviceAnswerError("exception 0x04"), { position: 7 });
    expect(await supervisor.poll()).toBe(false);
    expect(supervisor.online).toBe(true);
    expect(await supervisor.poll()).toBe(false);
    expect(supervisor.online).toBe(false);
    expect(supervisor.problem).toBe("The device's last 2 polls got unusable answers (the last: exception 0x04).");
    expect(await supervisor.poll()).toBe(true);
    expect(supervisor.online).toBe(true);
    expect(supervisor.points).toEqual({ position: 7 });
    expect(told).toEqual(["online", "online", "offline", "online", "answered"]);
  });

  it("takes a foreign device offline at once and tells the runtime its fence is not the one read", async () => {
    const { supervisor, answers, told } = setup();
    supervisor.linkChanged(true, null);
    answers.push(new DeviceMismatchError("no fencegate identity block at register 0"));
    await supervisor.poll();
    expect(supervisor.online).toBe(false);
    expect(supervisor.problem).toBe("no fencegate identity block at register 0");
    expect(told).toEqual(["online", "foreign", "offline"]);
  });

  it("shares one read among concurrent polls", async () => {
    const { supervisor, reads } = setup();
    await Promise.all([supervisor.poll(), supervisor.poll(), supervisor.poll()]);
    expect(reads()).toBe(1);
  });

  it("polls at its interval, and stops when stood down", async () => {
    const { world, supervisor, reads } = setup(1_000);
    supervisor.startPolling();
    await world.run(3_500);
    expect(reads()).toBe(4); // at 0, 1000, 2000, 3000
    supervisor.standDown();
    await world.run(10_000);
    expect(reads()).toBe(4);
    expect(supervisor.problem).toMatch(/stands by in its group/);
  });

  it("reads the device back once writes have paused, not once per write, with the applied setpoints shown at once", async () => {
    const { world, supervisor, reads } = setup(3_600_000);
    for (let i = 0; i < 5; i++) {
      supervisor.applied({ position: 10 * i });
      expect(supervisor.points).toEqual({ position: 10 * i });
      await world.run(world.nowMs + 50); // a write every 50 ms: inside the settle time
    }
    expect(reads()).toBe(0);
    await world.run(world.nowMs + 100);
    expect(reads()).toBe(1);
  });
});
