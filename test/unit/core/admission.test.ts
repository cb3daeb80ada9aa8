import { describe, expect, it } from "vitest";
import { admit, type Door } from "../../../src/core/admission.ts";

const open: Door = {
  accepting: true,
  takenOver: null,
  fenceKnown: true,
  problem: null,
  defaultDeadlineMs: 2000,
  journalBehind: undefined,
  secret: undefined,
};
const acquire = { verb: "lease/acquire", holder: "line-a", ttlMs: 30_000 } as const;
const command = { verb: "command", holder: "line-a", token: 3, seq: 7, set: { position: 40 } } as const;

describe("the door", () => {
  it("refuses an actuator not served here UNKNOWN_ACTUATOR, naming it, before anything else", () => {
    expect(admit("valve-9", 1, acquire, undefined, 0)).toEqual({
      kind: "refused",
      error: { code: "UNKNOWN_ACTUATOR", message: 'No actuator "valve-9" on this gateway.' },
    });
  });

  it("refuses every verb, reads too, while the gateway is shutting down", () => {
    for (const request of [acquire, command, { verb: "read" } as const]) {
      const admission = admit("valve-1", 1, request, { ...open, accepting: false }, 0);
      expect(admission).toMatchObject({ kind: "refused", error: { code: "DEVICE_UNAVAILABLE" } });
    }
  });

  it("grants nothing while a fenced device's own fence is unread, and says why when the device has a problem", () => {
    expect(admit("valve-1", 1, acquire, { ...open, fenceKnown: false }, 0)).toEqual({
      kind: "refused",
      error: { code: "DEVICE_UNAVAILABLE", message: "The device's own fence has not been read yet; no lease is granted until it has." },
    });
    const offline = admit("valve-1", 1, acquire, { ...open, fenceKnown: false, problem: "Unit 1 on bus plc does not answer" }, 0);
    expect(offline).toMatchObject({
      error: { message: "The device's own fence cannot be read, so no lease is granted: Unit 1 on bus plc does not answer." },
    });
  });

  it("in a gateway group, grants nothing until the actuator is taken over, even with its fence known", () => {
    const admission = admit("valve-1", 1, acquire, { ...open, takenOver: false }, 0);
    expect(admission).toMatchObject({ kind: "refused", error: { code: "DEVICE_UNAVAILABLE" } });
    expect(admission.kind === "refused" && admission.error.message).toMatch(/^This gateway has not yet taken the actuator over/);
    expect(admit("valve-1", 1, acquire, { ...open, takenOver: true }, 0).kind).toBe("decide");
  });

  it("lets commands, renewals and releases through an unread fence: the core's lease rules answer them", () => {
    expect(admit("valve-1", 1, command, { ...open, fenceKnown: false }, 0).kind).toBe("decide");
    const renew = { verb: "lease/renew", holder: "line-a", token: 3 } as const;
    expect(admit("valve-1", 1, renew, { ...open, takenOver: false }, 0).kind).toBe("decide");
  });

  it("hands an acquire to the core with the secret drawn for it", () => {
    expect(admit("valve-1", 4, acquire, { ...open, secret: "s3cr3t" }, 120)).toEqual({
      kind: "decide",
      input: { type: "acquire", nowMs: 120, ref: 4, holder: "line-a", ttlMs: 30_000, secret: "s3cr3t" },
    });
  });

  it("gives a command without a deadline the default one, and keeps its own otherwise", () => {
    const withDefault = admit("valve-1", 1, command, open, 0);
    expect(withDefault.kind === "decide" && withDefault.input).toMatchObject({ type: "command", deadlineMs: 2000 });
    const own = admit("valve-1", 1, { ...command, deadlineMs: 500 }, open, 0);
    expect(own.kind === "decide" && own.input).toMatchObject({ deadlineMs: 500 });
  });

  it("passes the journal's backlog on to the core, which orders OVERLOADED after the lease checks", () => {
    const behind = admit("valve-1", 1, command, { ...open, journalBehind: "The journal is 9 records behind." }, 0);
    expect(behind.kind === "decide" && behind.input).toMatchObject({ journalBehind: "The journal is 9 records behind." });
  });

  it("signs a command over its actuator and a renewal or release with its counter", () => {
    const cmd = admit("valve-1", 1, { ...command, mac: "m" }, open, 0);
    expect(cmd.kind === "decide" && cmd.input).toMatchObject({ signature: { actuator: "valve-1", mac: "m" } });
    expect(cmd.kind === "decide" && cmd.input.type === "command" && cmd.input.signature).not.toHaveProperty("counter");
    const release = admit("valve-1", 1, { verb: "lease/release", holder: "line-a", token: 3, counter: 5 }, open, 0);
    expect(release.kind === "decide" && release.input).toEqual({
      type: "release",
      nowMs: 0,
      ref: 1,
      holder: "line-a",
      token: 3,
      signature: { actuator: "valve-1", mac: null, counter: 5 },
    });
  });

  it("answers a read from the device, not from the core", () => {
    expect(admit("valve-1", 1, { verb: "read" }, { ...open, fenceKnown: false }, 0)).toEqual({ kind: "read" });
  });
});
