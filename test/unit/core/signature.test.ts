import { describe, expect, it } from "vitest";
import { canonicalForm, sign, verify } from "../../../packages/protocol/src/index.ts";
import { CoreDriver, codeOf } from "./harness.ts";

const FIELDS = {
  verb: "command",
  actuator: "valve-1",
  holder: "line-a",
  token: 7,
  seq: 3,
  set: { speed: 2, position: 42.5 },
  deadlineMs: 1000,
} as const;

describe("request signature (authenticated actuators)", () => {
  it("has a documented canonical form, points sorted by name", () => {
    expect(canonicalForm(FIELDS)).toBe('["fencegate-mac-v1","command","valve-1","line-a",7,3,[["position",42.5],["speed",2]],1000]');
    expect(canonicalForm({ verb: "lease/release", actuator: "valve-1", holder: "line-a", token: 7 })).toBe(
      '["fencegate-mac-v1","lease/release","valve-1","line-a",7,null,null,null]',
    );
  });

  it("carries a renew's or release's counter in the seq slot (and ignores a command's)", () => {
    expect(canonicalForm({ verb: "lease/renew", actuator: "valve-1", holder: "line-a", token: 7, counter: 12 })).toBe(
      '["fencegate-mac-v1","lease/renew","valve-1","line-a",7,12,null,null]',
    );
    expect(canonicalForm({ ...FIELDS, counter: 12 })).toBe(canonicalForm(FIELDS));
  });

  it("fails when a renew's counter is changed", () => {
    const renew = { verb: "lease/renew", actuator: "valve-1", holder: "line-a", token: 7, counter: 12 } as const;
    expect(verify("s3cret", { ...renew, counter: 13 }, sign("s3cret", renew))).toBe(false);
    expect(verify("s3cret", renew, sign("s3cret", renew))).toBe(true);
  });

  it("matches an HMAC-SHA256 test vector computed independently", () => {
    // printf '%s' '<canonical form>' | openssl dgst -sha256 -hmac s3cret
    expect(sign("s3cret", FIELDS)).toBe("1bfc8eec2d5207fea9a3fb5c428fa0952f18a71a12c6133249da715ab2588fd7");
  });

  it("verifies its own mac and nothing else", () => {
    const mac = sign("s3cret", FIELDS);
    expect(verify("s3cret", FIELDS, mac)).toBe(true);
    expect(verify("other", FIELDS, mac)).toBe(false);
    expect(verify("s3cret", FIELDS, null)).toBe(false);
    expect(verify("s3cret", FIELDS, "zz")).toBe(false);
    expect(verify("s3cret", FIELDS, mac.toUpperCase())).toBe(false);
  });

  it.each([
    ["actuator", { actuator: "valve-2" }],
    ["holder", { holder: "line-b" }],
    ["token", { token: 8 }],
    ["seq", { seq: 4 }],
    ["a set value", { set: { position: 42.6, speed: 2 } }],
    ["a set point", { set: { position: 42.5 } }],
    ["deadlineMs", { deadlineMs: 1001 }],
    ["the verb", { verb: "lease/renew" as const }],
  ])("fails when %s is changed", (_name, change) => {
    expect(verify("s3cret", { ...FIELDS, ...change }, sign("s3cret", FIELDS))).toBe(false);
  });
});

/** The signature a renew of holder A's lease `token` on valve-1 carries, keyed with `secret`. */
function signedRenew(secret: string, counter: number, token = 1) {
  const fields = { verb: "lease/renew", actuator: "valve-1", holder: "A", token, counter } as const;
  return { actuator: "valve-1", mac: sign(secret, fields), counter };
}

describe("authenticated leases in the core", () => {
  it("hands the secret out with the grant only", () => {
    const d = new CoreDriver();
    const reply = d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" }).reply;
    expect(reply).toEqual({ ok: true, lease: { holder: "A", token: 1, ttlMs: 1000, secret: "k1" } });
    const renewed = d.request({ type: "renew", ref: 2, holder: "A", token: 1, signature: signedRenew("k1", 1) }).reply;
    expect(renewed).toEqual({ ok: true, lease: { holder: "A", token: 1, ttlMs: 1000 } });
    expect(d.log.filter((e) => e.kind === "event").every((e) => !JSON.stringify(e).includes("k1"))).toBe(true);
    expect(d.log.filter((e) => e.kind === "persist").every((e) => !JSON.stringify(e).includes("k1"))).toBe(true);
  });

  it("does not hand the secret out again to a second acquire under the holder's name", () => {
    const d = new CoreDriver();
    d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" });
    const again = d.request({ type: "acquire", ref: 2, holder: "A", ttlMs: 1000, secret: "k2" }).reply;
    expect(codeOf(again)).toBe("LEASE_HELD");
    expect(JSON.stringify(again)).not.toContain("k1");
  });

  it("gives a new secret with the next grant after expiry", () => {
    const d = new CoreDriver();
    d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" });
    d.advance(1000);
    expect(d.request({ type: "acquire", ref: 2, holder: "A", ttlMs: 1000, secret: "k2" }).reply).toMatchObject({
      ok: true,
      lease: { token: 2, secret: "k2" },
    });
  });

  it("refuses a renew of the lease without its MAC BAD_SIGNATURE, and the lease keeps its expiry", () => {
    const d = new CoreDriver();
    d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" });
    const expiresAtMs = d.state.lease!.expiresAtMs;
    d.advance(500);
    expect(codeOf(d.request({ type: "renew", ref: 2, holder: "A", token: 1 }).reply)).toBe("BAD_SIGNATURE");
    expect(codeOf(d.request({ type: "renew", ref: 3, holder: "A", token: 1, signature: signedRenew("k2", 1) }).reply)).toBe(
      "BAD_SIGNATURE",
    );
    expect(d.state.lease!.expiresAtMs).toBe(expiresAtMs);
  });

  it("refuses a signed renew whose counter is not above the lease's last REPLAYED_REQUEST; gaps are fine", () => {
    const d = new CoreDriver();
    d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" });
    expect(d.request({ type: "renew", ref: 2, holder: "A", token: 1, signature: signedRenew("k1", 5) }).reply).toMatchObject({ ok: true });
    for (const counter of [5, 4]) {
      expect(codeOf(d.request({ type: "renew", ref: 3, holder: "A", token: 1, signature: signedRenew("k1", counter) }).reply)).toBe(
        "REPLAYED_REQUEST",
      );
    }
    expect(d.request({ type: "renew", ref: 4, holder: "A", token: 1, signature: signedRenew("k1", 9) }).reply).toMatchObject({ ok: true });
  });

  it("lets a request for another token through to the lease checks: its secret is gone", () => {
    const d = new CoreDriver();
    d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" });
    d.advance(1000);
    d.request({ type: "acquire", ref: 2, holder: "B", ttlMs: 1000, secret: "k2" });
    expect(codeOf(d.request({ type: "renew", ref: 3, holder: "A", token: 1 }).reply)).toBe("STALE_TOKEN");
  });

  it("refuses a command the journal is too far behind for OVERLOADED, after the signature and before the lease checks", () => {
    const d = new CoreDriver();
    d.request({ type: "acquire", ref: 1, holder: "A", ttlMs: 1000, secret: "k1" });
    const command = { type: "command", ref: 2, holder: "A", token: 1, seq: 1, set: { position: 1 }, deadlineMs: 1000 } as const;
    const mac = sign("k1", { verb: "command", actuator: "valve-1", holder: "A", token: 1, seq: 1, set: { position: 1 }, deadlineMs: 1000 });
    const journalBehind = "The journal is 9 records behind.";
    expect(codeOf(d.request({ ...command, journalBehind }).reply)).toBe("BAD_SIGNATURE");
    expect(d.request({ ...command, signature: { actuator: "valve-1", mac }, journalBehind }).reply).toEqual({
      ok: false,
      error: { code: "OVERLOADED", message: journalBehind },
    });
    expect(codeOf(d.request({ ...command, token: 9, journalBehind }).reply)).toBe("OVERLOADED");
  });
});
