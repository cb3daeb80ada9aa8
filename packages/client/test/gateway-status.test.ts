/** A retained state read with its gateway's status, including a gateway group member's role. */
import { describe, expect, it } from "vitest";
import { withGatewayStatus, type ActuatorState } from "../src/index.ts";

const state: ActuatorState = {
  actuator: "valve-1",
  online: true,
  lease: { holder: "line-a", token: 7, expiresInMs: 4000 },
  fence: { token: 7, seq: 3 },
  points: { position: 42 },
  at: "2026-12-01T08:00:00.000Z",
  gateway: "gw-a",
};

describe("withGatewayStatus", () => {
  it("keeps the state of a gateway that is online, or the active one of a group", () => {
    expect(withGatewayStatus(state, "online")).toEqual(state);
    expect(withGatewayStatus(state, "active")).toEqual(state);
    expect(withGatewayStatus(state, undefined)).toEqual(state);
  });

  it("reads the state of a gateway that is offline, or stands by in its group now, as offline with no lease", () => {
    for (const status of ["offline", "standby"] as const)
      expect(withGatewayStatus(state, status)).toMatchObject({ online: false, lease: null });
  });
});
