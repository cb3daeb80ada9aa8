/** An actuator whose every token up to 2^53−1 was granted: its own code and sentence, not INTERNAL. */
import { describe, expect, it } from "vitest";
import { initialState, step } from "../../../src/core/actuator.ts";
import { CONFIG, codeOf, replyTo } from "./harness.ts";

const MAX = Number.MAX_SAFE_INTEGER;

describe("an exhausted token space", () => {
  it("refuses an acquire with TOKENS_EXHAUSTED, saying what happened and what to do", () => {
    const state = initialState({ highestGranted: MAX, lastGrantHolder: null, fence: { token: MAX, seq: null }, recent: [] });
    const online = step(CONFIG, state, { type: "link", online: true, nowMs: 1 });
    const { effects } = step(CONFIG, online.state, { type: "acquire", nowMs: 2, ref: 1, holder: "A", ttlMs: 500 });
    const reply = replyTo(effects, 1);
    expect(codeOf(reply)).toBe("TOKENS_EXHAUSTED");
    expect(reply?.ok === false && reply.error.message).toMatch(/2\^53.*granted.*journal recover --floor/);
    expect(effects.some((e) => e.kind === "persist")).toBe(false);
  });

  it("still grants the last token there is", () => {
    const state = initialState({ highestGranted: MAX - 1, lastGrantHolder: null, fence: { token: MAX - 1, seq: null }, recent: [] });
    const online = step(CONFIG, state, { type: "link", online: true, nowMs: 1 });
    const reply = replyTo(step(CONFIG, online.state, { type: "acquire", nowMs: 2, ref: 1, holder: "A", ttlMs: 500 }).effects, 1);
    expect(reply?.ok && "lease" in reply && reply.lease?.token).toBe(MAX);
  });
});
