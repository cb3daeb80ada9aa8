/**
 * The chaos checker catches what it is there to catch: each history below breaks one
 * safety property, and the clean one breaks none (a checker that passes everything would
 * make the chaos run worthless).
 */
import { describe, expect, it } from "vitest";
import { check, positionFor, type ControllerEntry, type DaemonLife, type DeviceEntry, type History } from "./history.ts";

const grant = (holder: string, token: number, mono: number): ControllerEntry => ({
  ev: "granted",
  holder,
  token,
  mono,
  sentMono: mono - 1,
});
const sent = (holder: string, token: number, seq: number, mono: number): ControllerEntry => ({
  ev: "sent",
  holder,
  token,
  seq,
  position: positionFor(seq),
  mono,
});
const applied = (holder: string, token: number, seq: number, mono: number): ControllerEntry => ({
  ev: "applied",
  holder,
  token,
  seq,
  position: positionFor(seq),
  applied: positionFor(seq),
  mono,
});
const dev = (token: number, seq: number, k: number, mono: number): DeviceEntry => ({
  token,
  seq,
  position: positionFor(k),
  mono,
  errMs: 0.1,
  simLife: 1,
});
const life = (startMono: number, killMono: number | null, highestGranted: number, granted: [string, number][] = []): DaemonLife => ({
  startMono,
  killMono,
  loaded: highestGranted === 0 ? null : { highestGranted, fence: { token: highestGranted, seq: null } },
  granted: granted.map(([holder, token]) => ({ holder, token })),
});

/** a holds token 1 and applies two commands; the daemon restarts; b gets token 2 and applies one. */
function clean(): { controllers: ControllerEntry[]; device: DeviceEntry[]; daemon: DaemonLife[] } {
  return {
    controllers: [
      grant("a", 1, 10),
      sent("a", 1, 0, 11),
      applied("a", 1, 0, 13),
      sent("a", 1, 1, 14),
      applied("a", 1, 1, 16),
      grant("b", 2, 110),
      sent("b", 2, 0, 111),
      applied("b", 2, 0, 113),
    ],
    device: [dev(1, 0, 0, 12), dev(1, 1, 1, 15), dev(2, 0, 0, 112)],
    daemon: [life(0, 100, 0, [["a", 1]]), life(101, null, 1, [["b", 2]])],
  };
}

const violations = (h: History) => check(h).violations;

describe("the chaos checker", () => {
  it("passes a clean history", () => {
    expect(violations(clean())).toEqual([]);
  });

  it("catches a stale write: a command applied after a newer token was granted", () => {
    const h = clean();
    h.controllers.push(sent("a", 1, 2, 114));
    h.device.push(dev(1, 2, 2, 115)); // also makes the device's tokens go back
    expect(violations(h).join("\n")).toMatch(/token 2 had been granted/);
  });

  it("catches tokens going back at the device", () => {
    const h = clean();
    h.device.splice(2, 0, dev(2, 0, 0, 15.5));
    h.device[3] = dev(1, 2, 2, 16);
    expect(violations(h).join("\n")).toMatch(/device: token went back/);
  });

  it("catches a token granted twice to different holders, and again after a restart", () => {
    const h = clean();
    h.controllers.push(grant("c", 2, 120));
    expect(violations(h).join("\n")).toMatch(/token 2 granted to b and to c/);
    const h2 = clean();
    h2.controllers.push(grant("a", 1, 105));
    expect(violations(h2).join("\n")).toMatch(/again after a daemon restart/);
  });

  it("catches an 'applied' reply the device never applied, and a phantom write nobody sent", () => {
    const h = clean();
    h.controllers.push(sent("b", 2, 1, 114), applied("b", 2, 1, 116));
    h.device.push(dev(2, 5, 7, 117));
    const found = violations(h).join("\n");
    expect(found).toMatch(/the device never applied it/);
    expect(found).toMatch(/which nobody sent/);
  });

  it("catches a journal that forgot a grant, and one (token, seq) answered for two commands", () => {
    const h = clean();
    h.daemon[1] = life(101, null, 0);
    expect(violations(h).join("\n")).toMatch(/token 1 had been granted before/);
    const h2 = clean();
    // A restarted a, same token: its new command answered with the old (1, 1)'s outcome.
    h2.controllers.push(
      { ev: "sent", holder: "a", token: 1, seq: 0, position: 55, mono: 50 },
      { ev: "applied", holder: "a", token: 1, seq: 1, position: 55, applied: positionFor(1), mono: 51 },
    );
    const found = violations(h2).join("\n");
    expect(found).toMatch(/reported applied for two commands/);
    expect(found).toMatch(/asked for 55, reply says 0.01/);
  });
});
