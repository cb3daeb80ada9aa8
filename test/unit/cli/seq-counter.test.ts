/**
 * The counters behind `fencegate send` without --seq: one per (broker, base, actuator,
 * holder, token), in a small state file, bounded.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_SEQ_COUNTERS, SeqCounterError, SeqCounters, stateDir } from "../../../src/cli/seq-counter.ts";

let dir: string;
beforeEach(() => void (dir = mkdtempSync(join(tmpdir(), "fencegate-seq-"))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("send's seq counters", () => {
  it("count up per key from 1, each apart, and across processes (the file)", () => {
    expect([
      new SeqCounters(dir).next("a"),
      new SeqCounters(dir).next("a"),
      new SeqCounters(dir).next("b"),
      new SeqCounters(dir).next("a"),
    ]).toEqual([1, 2, 1, 3]);
  });

  it("move to at least the seq asked for, and count on from there", () => {
    const counters = new SeqCounters(dir);
    counters.next("a");
    expect(counters.next("a", 40)).toBe(40);
    expect(counters.next("a")).toBe(41);
  });

  it(`keep at most ${MAX_SEQ_COUNTERS} counters, dropping the least recently used`, () => {
    const counters = new SeqCounters(dir);
    for (let i = 0; i < MAX_SEQ_COUNTERS; i++) counters.next(`k${i}`);
    counters.next("k0"); // used again: now the most recent
    counters.next("one-more");
    const kept = Object.keys(JSON.parse(readFileSync(counters.file, "utf8")));
    expect(kept).toHaveLength(MAX_SEQ_COUNTERS);
    expect(kept).not.toContain("k1");
    expect(kept.slice(-2)).toEqual(["k0", "one-more"]);
    expect(counters.next("k0")).toBe(3);
  });

  it("start afresh from a torn file", () => {
    const counters = new SeqCounters(dir);
    writeFileSync(counters.file, '{"a": 4');
    expect(counters.next("a")).toBe(1);
  });

  it("say what to do when the counter cannot be kept", () => {
    const notADir = join(dir, "file");
    writeFileSync(notADir, "");
    expect(() => new SeqCounters(join(notADir, "state")).next("a")).toThrow(SeqCounterError);
    expect(() => new SeqCounters(join(notADir, "state")).next("a")).toThrow(
      /^cannot (read|keep) the seq counters? in .*: pass --seq N, or set FENCEGATE_STATE_DIR/,
    );
  });

  it("live in FENCEGATE_STATE_DIR, else XDG_STATE_HOME/fencegate", () => {
    expect(stateDir({ FENCEGATE_STATE_DIR: "/x", XDG_STATE_HOME: "/y" })).toBe("/x");
    expect(stateDir({ XDG_STATE_HOME: "/y" })).toBe("/y/fencegate");
  });
});
