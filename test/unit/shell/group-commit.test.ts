/**
 * The GroupCommitter over an asynchronous JournalWriter (the SQLite journal's shape), with
 * commits completed by hand: one batch in flight, what arrives meanwhile goes as the next
 * single batch, FIFO, nobody resolved before their batch is acknowledged, and a failure
 * rejects the batch in flight and everything after it. Then gathering, under a hand-driven
 * clock: who waits for other actuators' records, for how long, and who never waits. Then
 * the asynchronous audit trail: its lag bounds, its order with the grants, its queue bound,
 * and a failed or stalled commit reported as fatal.
 */
import { describe, expect, it } from "vitest";
import { MemoryJournal } from "../../../src/adapters/journal/memory.ts";
import { GroupCommitter, JournalStallError, type AuditBounds } from "../../../src/shell/group-commit.ts";
import type { Clock, Journal, JournalEntry, JournalWriter, Scheduler } from "../../../src/shell/ports.ts";

const entry = (seq: number, actuator = "v1"): JournalEntry => ({ actuator, record: { type: "fenceObserved", token: 1, seq } });
/** A command's intent: an audit record. */
const audited = (seq: number, actuator = "v1"): JournalEntry => ({
  actuator,
  record: { type: "intent", holder: "a", token: 1, seq, set: { position: seq } },
});

class ManualWriter implements Journal, JournalWriter {
  /** Each batch sent: its records as seqs (an audit record's as "a<seq>"). */
  readonly batches: { seqs: (number | string)[]; resolve: () => void; reject: (e: unknown) => void }[] = [];
  load() {
    return new Map();
  }
  commit(): void {
    throw new Error("the committer must use commitAsync");
  }
  close(): void {}
  commitAsync(entries: readonly JournalEntry[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.batches.push({
        seqs: entries.map((e) =>
          e.record.type === "fenceObserved" ? e.record.seq! : e.record.type === "intent" ? `a${e.record.seq}` : -1,
        ),
        resolve,
        reject,
      });
    });
  }
}

/** defer() runs on the next macrotask, like setImmediate. */
const scheduler: Scheduler = { at: () => () => {}, defer: (fn) => void setImmediate(fn) };
const clock: Clock = { monotonicMs: () => 0, wallNow: () => new Date(0) };
const turn = () => new Promise<void>((r) => setImmediate(r));

describe("GroupCommitter over an asynchronous writer", () => {
  it("keeps one batch in flight and sends what accumulated as the next, in order", async () => {
    const w = new ManualWriter();
    const gc = new GroupCommitter(w, scheduler, clock);
    const done: number[] = [];
    const track = (seq: number) => void gc.persist([entry(seq)]).then(() => done.push(seq));
    track(0);
    track(1);
    await turn();
    expect(w.batches.map((b) => b.seqs)).toEqual([[0, 1]]);
    track(2);
    await turn();
    track(3);
    await turn();
    expect(w.batches).toHaveLength(1); // still one in flight
    expect(done).toEqual([]); // nothing resolved before its ack
    w.batches[0]!.resolve();
    await turn();
    await turn();
    expect(done).toEqual([0, 1]);
    expect(w.batches.map((b) => b.seqs)).toEqual([
      [0, 1],
      [2, 3],
    ]);
    expect(gc.commits).toBe(1);
    w.batches[1]!.resolve();
    await gc.idle();
    expect(done).toEqual([0, 1, 2, 3]);
    expect(gc.commits).toBe(2);
    expect(gc.entriesCommitted).toBe(4);
  });

  it("a failure rejects the batch in flight, the ones waiting behind it, and every later persist", async () => {
    const w = new ManualWriter();
    const gc = new GroupCommitter(w, scheduler, clock);
    const outcome: string[] = [];
    const track = (seq: number) =>
      gc.persist([entry(seq)]).then(
        () => outcome.push(`${seq} ok`),
        (e: unknown) => outcome.push(`${seq} ${(e as Error).message}`),
      );
    const p = [track(0)];
    await turn();
    p.push(track(1), track(2));
    await turn();
    w.batches[0]!.reject(new Error("disk full"));
    await Promise.all(p);
    expect(outcome).toEqual(["0 disk full", "1 disk full", "2 disk full"]);
    expect(w.batches).toHaveLength(1); // the waiting ones never reached the journal
    await expect(gc.persist([entry(3)])).rejects.toThrow("disk full");
    await gc.idle();
  });

  it("with a synchronous journal commits in the deferred turn, as before", async () => {
    const j = new MemoryJournal({ recentLimit: 4 });
    j.load();
    const gc = new GroupCommitter(j, scheduler, clock);
    const a = gc.persist([entry(0)]);
    const b = gc.persist([entry(1)]);
    await Promise.all([a, b]);
    expect(j.commitCount).toBe(1);
    expect(gc.commits).toBe(1);
  });
});

/** A clock moved by hand, and timers that fire when it passes them. */
class ManualTime implements Clock, Scheduler {
  nowMs = 0;
  private timers: { atMs: number; fn: () => void }[] = [];
  monotonicMs(): number {
    return this.nowMs;
  }
  wallNow(): Date {
    return new Date(this.nowMs);
  }
  at(atMs: number, fn: () => void): () => void {
    const timer = { atMs, fn };
    this.timers.push(timer);
    return () => (this.timers = this.timers.filter((t) => t !== timer));
  }
  defer(fn: () => void): void {
    setImmediate(fn);
  }
  async advance(ms: number): Promise<void> {
    this.nowMs += ms;
    for (const t of this.timers.filter((t) => t.atMs <= this.nowMs)) {
      this.timers = this.timers.filter((x) => x !== t);
      t.fn();
    }
    await turn();
  }
}

describe("GroupCommitter gathering (gatherMaxMs)", () => {
  /** A committer whose recent batches carried `actuators`, each sync having taken `syncMs`. */
  async function warmed(syncMs: number, actuators = ["a", "b"], gatherMaxMs = 2) {
    const time = new ManualTime();
    const w = new ManualWriter();
    const gc = new GroupCommitter(w, time, time, { gatherMaxMs });
    for (let i = 0; i < 30; i++) {
      for (const a of actuators) void gc.persist([entry(i, a)]);
      await turn();
      await time.advance(syncMs);
      w.batches.at(-1)!.resolve();
      await turn();
    }
    expect(w.batches).toHaveLength(30); // warming never waited: every batch held all actuators
    return { time, w, gc };
  }
  const lastBatch = (w: ManualWriter) => w.batches.at(-1)!.seqs.length;

  it("a record finding the disk idle waits for the other busy actuator's and goes with it as soon as it arrives", async () => {
    const { time, w, gc } = await warmed(6);
    void gc.persist([entry(100, "a")]);
    await turn();
    await time.advance(1);
    expect(w.batches).toHaveLength(30); // waiting for b
    void gc.persist([entry(100, "b")]);
    await turn();
    expect(w.batches).toHaveLength(31);
    expect(lastBatch(w)).toBe(2);
  });

  it("goes alone once gatherMaxMs has passed without the other", async () => {
    const { time, w, gc } = await warmed(6);
    void gc.persist([entry(100, "a")]);
    await turn();
    await time.advance(1.9);
    expect(w.batches).toHaveLength(30);
    await time.advance(0.1);
    expect(w.batches).toHaveLength(31);
    expect(lastBatch(w)).toBe(1);
  });

  it.each([
    ["only one actuator is busy", 6, ["a"], 2],
    ["gatherMaxMs is 0", 6, ["a", "b"], 0],
    ["the disk is fast: half a 0.2 ms sync is shorter than a timer can wait", 0.2, ["a", "b"], 2],
  ] as const)("never waits when %s", async (_why, syncMs, actuators, gatherMaxMs) => {
    const { w, gc } = await warmed(syncMs, [...actuators], gatherMaxMs);
    void gc.persist([entry(100, "a")]);
    await turn();
    expect(w.batches).toHaveLength(31);
  });

  it("a record that waited behind a sync in flight goes the moment the disk is free", async () => {
    const { time, w, gc } = await warmed(6);
    void gc.persist([entry(100, "a")]);
    void gc.persist([entry(100, "b")]);
    await turn();
    expect(w.batches).toHaveLength(31);
    void gc.persist([entry(101, "a")]); // behind the sync in flight
    await time.advance(6);
    w.batches.at(-1)!.resolve();
    await turn();
    await turn();
    expect(w.batches).toHaveLength(32);
    expect(lastBatch(w)).toBe(1);
  });
});

describe("GroupCommitter: the asynchronous audit trail", () => {
  const BOUNDS: AuditBounds = { lagMs: 200, lagRecords: 4, queueLimit: 8, stallMs: 1_000 };
  function setup(bounds = BOUNDS, actuators = 1) {
    const time = new ManualTime();
    const w = new ManualWriter();
    const failures: unknown[] = [];
    const gc = new GroupCommitter(w, time, time, { gatherMaxMs: 0, audit: bounds, onFailure: (err) => failures.push(err), actuators });
    return { time, w, gc, failures };
  }

  it("an audit record waits for lagMs, then goes in a commit of its own; nobody waits for it", async () => {
    const { time, w, gc } = setup();
    gc.audit([audited(1)]);
    await time.advance(50);
    gc.audit([audited(2)]);
    await time.advance(149);
    expect(w.batches).toHaveLength(0);
    expect(gc.backlog()).toEqual({ records: 2, oldestAtMs: 0 });
    await time.advance(1);
    await turn();
    expect(w.batches.map((b) => b.seqs)).toEqual([["a1", "a2"]]);
  });

  it("lagRecords audit records waiting start a commit at once", async () => {
    const { w, gc } = setup();
    gc.audit([audited(1), audited(2)]);
    gc.audit([audited(3)]);
    await turn();
    expect(w.batches).toHaveLength(0);
    gc.audit([audited(4)]);
    await turn();
    expect(w.batches.map((b) => b.seqs)).toEqual([["a1", "a2", "a3", "a4"]]);
  });

  it("a grant goes at once and carries the audit records queued before it, in order", async () => {
    const { w, gc } = setup();
    gc.audit([audited(1)]);
    const granted = gc.persist([entry(7)]);
    gc.audit([audited(2)]); // after the grant, in the same turn: the same commit, after it
    await turn();
    expect(w.batches.map((b) => b.seqs)).toEqual([["a1", 7, "a2"]]);
    w.batches[0]!.resolve();
    await granted;
    expect(gc.backlog().records).toBe(0);
  });

  it("audit records arriving while a commit is in flight wait for their lag after it, not for nothing", async () => {
    const { time, w, gc } = setup();
    void gc.persist([entry(1)]);
    await turn();
    gc.audit([audited(2)]);
    w.batches[0]!.resolve();
    await turn();
    await turn();
    expect(w.batches).toHaveLength(1); // the audit record's lag has not passed
    await time.advance(200);
    await turn();
    expect(w.batches.map((b) => b.seqs)).toEqual([[1], ["a2"]]);
  });

  it("is saturated once queueLimit records are not yet durable, in flight included", async () => {
    const { w, gc } = setup();
    gc.audit([audited(1), audited(2), audited(3), audited(4)]); // a commit starts
    await turn();
    gc.audit([audited(5), audited(6), audited(7)]);
    expect(gc.saturated).toBe(false);
    gc.audit([audited(8)]);
    expect(gc.saturated).toBe(true);
    w.batches[0]!.resolve();
    await turn();
    expect(gc.saturated).toBe(false);
  });

  it("gives each actuator an equal share of queueLimit: the flooding one is refused at its share, the others go on, and saturation() says who", async () => {
    const { w, gc } = setup(BOUNDS, 2); // queueLimit 8: a share of 4 each
    expect(gc.share).toBe(4);
    gc.audit([audited(1, "v1"), audited(2, "v1")]);
    gc.audit([audited(3, "v2")]);
    gc.audit([audited(4, "v1")]); // lagRecords: a commit starts, and in flight still counts
    await turn();
    expect(w.batches).toHaveLength(1);
    expect(gc.saturatedFor("v1")).toBe(false); // 3 of its 4
    expect(gc.saturation()).toBeNull();
    gc.audit([audited(5, "v1")]);
    expect(gc.saturatedFor("v1")).toBe(true); // at its share
    expect(gc.saturatedFor("v2")).toBe(false);
    expect(gc.saturated).toBe(false); // 5 of 8
    expect(gc.saturation()).toBe(
      "the journal is 5 records behind: v1 holds its share of journal.auditQueueLimit (4 records each), and its commands are refused (OVERLOADED) until the disk catches up",
    );
    w.batches[0]!.resolve();
    await turn();
    expect(gc.backlogOf("v1")).toBe(1);
    expect(gc.saturatedFor("v1")).toBe(false);
    expect(gc.saturation()).toBeNull();
  });

  it("with one actuator its share is the whole queueLimit", () => {
    expect(setup(BOUNDS, 1).gc.share).toBe(8);
    expect(setup(BOUNDS, 100).gc.share).toBe(1); // more actuators than records: one each, never none
  });

  it("idle() commits the audit records within their lag now (a clean stop loses none)", async () => {
    const { w, gc } = setup();
    gc.audit([audited(1)]);
    const idle = gc.idle();
    await turn();
    expect(w.batches.map((b) => b.seqs)).toEqual([["a1"]]);
    w.batches[0]!.resolve();
    await idle;
  });

  it("whenDurable waits for the records handed over before it (within their lag), not those after", async () => {
    const { time, w, gc } = setup();
    await expect(gc.whenDurable()).resolves.toBeUndefined(); // nothing waiting
    gc.audit([audited(1)]);
    let durable = false;
    const waiting = gc.whenDurable().then(() => (durable = true));
    gc.audit([audited(2)]);
    await time.advance(200);
    await turn();
    expect(durable).toBe(false);
    w.batches[0]!.resolve();
    await waiting;
    expect(gc.backlog().records).toBe(0);
  });

  it("a failed audit commit is reported as fatal, and later records are dropped", async () => {
    const { time, w, gc, failures } = setup();
    gc.audit([audited(1)]);
    await time.advance(200);
    await turn();
    w.batches[0]!.reject(new Error("EIO"));
    await turn();
    expect(failures).toEqual([new Error("EIO")]);
    gc.audit([audited(2)]);
    await time.advance(200);
    expect(w.batches).toHaveLength(1);
    await expect(gc.persist([entry(3)])).rejects.toThrow("EIO");
  });

  it("a commit not durable within stallMs is a stalled disk: fatal, with a sentence that names the setting", async () => {
    const { time, w, gc, failures } = setup();
    gc.audit([audited(1)]);
    await time.advance(200);
    await turn();
    expect(w.batches).toHaveLength(1);
    await time.advance(999);
    expect(failures).toEqual([]);
    await time.advance(1);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toBeInstanceOf(JournalStallError);
    expect(String(failures[0])).toMatch(/not become durable within 1000 ms \(journal\.commitStallMs\): the disk has stalled/);
    w.batches[0]!.resolve(); // too late: nothing more is committed
    await turn();
    expect(gc.commits).toBe(0);
  });
});
