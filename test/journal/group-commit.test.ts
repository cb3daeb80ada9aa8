/**
 * The GroupCommitter over an asynchronous JournalWriter (the worker journal's shape), with
 * commits completed by hand: one batch in flight, what arrives meanwhile goes as the next
 * single batch, FIFO, nobody resolved before their batch is acknowledged, and a failure
 * rejects the batch in flight and everything after it.
 */
import { describe, expect, it } from "vitest";
import { MemoryJournal } from "../../src/adapters/journal/memory.ts";
import { GroupCommitter } from "../../src/shell/group-commit.ts";
import type { Journal, JournalEntry, JournalWriter, Scheduler } from "../../src/shell/ports.ts";

const entry = (seq: number): JournalEntry => ({ actuator: "v1", record: { type: "fenceObserved", token: 1, seq } });

class ManualWriter implements Journal, JournalWriter {
  readonly batches: { seqs: number[]; resolve: () => void; reject: (e: unknown) => void }[] = [];
  load() {
    return new Map();
  }
  commit(): void {
    throw new Error("the committer must use commitAsync");
  }
  close(): void {}
  commitAsync(entries: readonly JournalEntry[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.batches.push({ seqs: entries.map((e) => (e.record.type === "fenceObserved" ? e.record.seq! : -1)), resolve, reject });
    });
  }
}

/** defer() runs on the next macrotask, like setImmediate. */
const scheduler: Scheduler = { at: () => () => {}, defer: (fn) => void setImmediate(fn) };
const turn = () => new Promise<void>((r) => setImmediate(r));

describe("GroupCommitter over an asynchronous writer", () => {
  it("keeps one batch in flight and sends what accumulated as the next, in order", async () => {
    const w = new ManualWriter();
    const gc = new GroupCommitter(w, scheduler);
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
    expect(w.batches.map((b) => b.seqs)).toEqual([[0, 1], [2, 3]]);
    expect(gc.commits).toBe(1);
    w.batches[1]!.resolve();
    await gc.idle();
    expect(done).toEqual([0, 1, 2, 3]);
    expect(gc.commits).toBe(2);
    expect(gc.entriesCommitted).toBe(4);
  });

  it("a failure rejects the batch in flight, the ones waiting behind it, and every later persist", async () => {
    const w = new ManualWriter();
    const gc = new GroupCommitter(w, scheduler);
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
    const gc = new GroupCommitter(j, scheduler);
    const a = gc.persist([entry(0)]);
    const b = gc.persist([entry(1)]);
    await Promise.all([a, b]);
    expect(j.commitCount).toBe(1);
    expect(gc.commits).toBe(1);
  });
});
