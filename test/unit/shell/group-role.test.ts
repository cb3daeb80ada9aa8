/**
 * One actuator's part in a gateway group (src/shell/group-role.ts), on fake ports: the inputs
 * after an unsettled grant wait and come back in order, a grant counts only once the group
 * confirmed it, and a takeover succeeds only with its token confirmed, the core's fence at it
 * and the device's fence raised.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { Input } from "../../../src/core/types.ts";
import { ActuatorGroupRole, type TakeoverSteps } from "../../../src/shell/group-role.ts";
import type { DevicePort, FenceRaise, GrantCommit, GroupPort } from "../../../src/shell/ports.ts";

interface Fakes {
  readonly stale: string[];
  readonly raised: number[];
  commitAnswer: GrantCommit;
  raiseAnswer: FenceRaise;
}

function role(fenced = true, deviceToken = 7, groupToken = 9) {
  const fakes: Fakes = { stale: [], raised: [], commitAnswer: { ok: true }, raiseAnswer: { kind: "raised" } };
  const group: GroupPort = {
    commitGrant: async () => fakes.commitAnswer,
    readToken: async () => groupToken,
    mayDriveDevices: () => true,
    stale: (reason) => fakes.stale.push(reason),
  };
  const device = {
    readFence: async () => ({ token: deviceToken, seq: 3 }),
    raiseFence: async (token: number) => {
      fakes.raised.push(token);
      return fakes.raiseAnswer;
    },
  } as unknown as DevicePort;
  return { r: new ActuatorGroupRole("valve-1", device, fenced, group, pino({ level: "silent" })), fakes };
}

/** A runtime whose takeover step grants `floor + 1`, carried out (committed to the group) when `commits`. */
function steps(r: ActuatorGroupRole, commits = true) {
  const seen = { floors: [] as number[], fence: 0, takenOver: 0 };
  let carriedOut: Promise<unknown> = Promise.resolve();
  const s: TakeoverSteps = {
    settled: async () => void (await carriedOut),
    serving: () => true,
    takeover: (floor) => {
      seen.floors.push(floor);
      const token = floor + 1;
      if (commits) {
        carriedOut = r.commit(token);
        seen.fence = token;
      }
      return token;
    },
    fenceToken: () => seen.fence,
    takenOver: () => void seen.takenOver++,
  };
  return { s, seen };
}

const tick = (nowMs: number): Input => ({ type: "tick", nowMs });

describe("a gateway group's actuator role", () => {
  it("holds the inputs that arrive while a grant is unsettled and hands them back in order once none is", () => {
    const { r } = role();
    expect(r.holds(tick(1))).toBe(false);
    r.grantStarted();
    r.grantStarted();
    expect(r.holds(tick(2))).toBe(true);
    expect(r.holds(tick(3))).toBe(true);
    r.grantSettled();
    expect(r.released()).toBeUndefined(); // one grant still unsettled
    r.grantSettled();
    expect([r.released()?.nowMs, r.released()?.nowMs, r.released()]).toEqual([2, 3, undefined]);
    expect(r.holds(tick(4))).toBe(false);
  });

  it("takes the actuator over above both the device's fence and the group's token, and raises the device's fence to that token", async () => {
    const { r, fakes } = role(true, 7, 9);
    const { s, seen } = steps(r);
    expect(r.secured).toBe(false);
    expect(await r.secure(s)).toBe(true);
    expect(seen.floors).toEqual([9]);
    expect(fakes.raised).toEqual([10]);
    expect([r.secured, seen.takenOver]).toEqual([true, 1]);
    r.standDown();
    expect(r.secured).toBe(false);
  });

  it("runs one takeover at a time: a second call while one runs shares it", async () => {
    const { r, fakes } = role();
    const { s, seen } = steps(r);
    const [a, b] = await Promise.all([r.secure(s), r.secure(s)]);
    expect([a, b, seen.floors.length, fakes.raised.length]).toEqual([true, true, 1, 1]);
  });

  it("does not count a takeover the group did not confirm, and raises no fence for it", async () => {
    const { r, fakes } = role();
    fakes.commitAnswer = { ok: false, stale: false, message: "etcd did not answer" };
    const { s, seen } = steps(r);
    expect(await r.secure(s)).toBe(false);
    expect([r.secured, fakes.raised, seen.takenOver]).toEqual([false, [], 0]);
  });

  it("does not count a takeover whose step was not carried out (the core's fence is not at its token)", async () => {
    const { r, fakes } = role();
    const { s } = steps(r, false);
    expect(await r.secure(s)).toBe(false);
    expect(fakes.raised).toEqual([]);
  });

  it("stands this gateway down when the device refuses the raise: another gateway holds a newer token", async () => {
    const { r, fakes } = role();
    fakes.raiseAnswer = { kind: "refused", message: "the device holds token 12" };
    expect(await r.secure(steps(r).s)).toBe(false);
    expect(fakes.stale).toEqual(["valve-1: the device holds token 12"]);
    expect(r.secured).toBe(false);
  });

  it("takes a plain device over without a fence to raise", async () => {
    const { r, fakes } = role(false, 0, 4);
    const { s, seen } = steps(r);
    expect(await r.secure(s)).toBe(true);
    expect([seen.floors, fakes.raised]).toEqual([[4], []]);
  });

  it("stands down on a refused commit only when it says another gateway leads, and on a device's 0x46", () => {
    const { r, fakes } = role();
    r.refused({ ok: false, stale: false, message: "no answer" });
    expect(fakes.stale).toEqual([]);
    r.refused({ ok: false, stale: true, message: "gw-b leads" });
    r.deviceRefused(5);
    expect(fakes.stale).toEqual([
      "valve-1: gw-b leads",
      "the device of valve-1 refused token 5 (0x46): another gateway has raised its fence",
    ]);
  });
});
