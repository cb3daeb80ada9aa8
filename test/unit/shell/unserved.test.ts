/** Which actuators a gateway says nothing serves, and what their retained state says. */
import { describe, expect, it } from "vitest";
import { MAX_UNSERVED_ACTUATORS, UnservedActuators } from "../../../src/shell/unserved.ts";

const clock = { monotonicMs: () => 0, wallNow: () => new Date("2026-12-06T12:00:00Z") };
const journal = (entries: Record<string, [number, number | null]>) =>
  new Map(Object.entries(entries).map(([id, [token, seq]]) => [id, { fence: { token, seq } }]));

describe("actuators nothing serves", () => {
  it("are those the journal holds and the configuration does not, in id order, offline with no lease and the journal's fence", () => {
    const unserved = new UnservedActuators(
      "gw-a",
      new Set(["valve-1"]),
      clock,
      journal({ "valve-9": [4, 2], "valve-1": [7, 1], "valve-3": [1, null] }),
    );
    const views = unserved.views();
    expect(views.map((v) => v.actuator)).toEqual(["valve-3", "valve-9"]);
    expect(views[1]).toEqual({
      actuator: "valve-9",
      online: false,
      lease: null,
      fence: { token: 4, seq: 2 },
      points: {},
      pointsAgeMs: null,
      gateway: "gw-a",
      safeWrite: null,
      pointFaults: {},
      problem:
        "no gateway serves this actuator: its journal holds it, and it is not in the configuration of gateway gw-a; requests to it get no reply. Add it to a gateway's configuration to serve it again.",
      at: new Date("2026-12-06T12:00:00Z"),
    });
  });

  it("never include one another gateway serves", () => {
    const unserved = new UnservedActuators("gw-a", new Set(), clock, journal({ "valve-2": [1, 0], "valve-3": [1, 0] }));
    unserved.servedByOthers(["valve-3"]);
    expect(unserved.views().map((v) => v.actuator)).toEqual(["valve-2"]);
  });

  it("take a group's tokens, keep the higher fence of journal and group, and never a served actuator", () => {
    const unserved = new UnservedActuators("gw-b", new Set(["valve-1"]), clock, journal({ "valve-2": [3, 5] }), "plant");
    unserved.groupTokens(
      new Map([
        ["valve-1", 9],
        ["valve-2", 2],
        ["valve-4", 6],
      ]),
    );
    const views = unserved.views();
    expect(views.map((v) => [v.actuator, v.fence])).toEqual([
      ["valve-2", { token: 3, seq: 5 }],
      ["valve-4", { token: 6, seq: null }],
    ]);
    expect(views[1]!.problem).toContain(
      "gateway group plant has granted tokens on it, and it is not in the configuration of its active gateway gw-b",
    );
    unserved.groupTokens(new Map([["valve-2", 8]]));
    expect(unserved.views()[0]!.fence).toEqual({ token: 8, seq: null });
  });

  it(`speak for at most ${MAX_UNSERVED_ACTUATORS} actuators, whatever a journal or etcd holds`, () => {
    const many = new Map(
      Array.from({ length: MAX_UNSERVED_ACTUATORS + 50 }, (_, i) => [
        `v-${String(i).padStart(4, "0")}`,
        { fence: { token: 1, seq: null } },
      ]),
    );
    expect(new UnservedActuators("gw-a", new Set(), clock, many).views()).toHaveLength(MAX_UNSERVED_ACTUATORS);
  });
});
