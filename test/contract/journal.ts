/**
 * The Journal contract, written once and run against every implementation
 * (sqlite.test.ts, memory.test.ts). The reference is the fold of `applyRecord`, with
 * `afterRestart` at every reopen.
 */
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import type { DurableSnapshot } from "../../src/core/actuator.ts";
import { OUTCOME_LOST_IN_RESTART } from "../../src/core/durable.ts";
import type { JournalRecord, Outcome } from "../../src/core/types.ts";
import { foldEntries, restartAll } from "../../src/adapters/journal/memory.ts";
import type { Journal, JournalEntry } from "../../src/shell/ports.ts";

export type OpenedJournal = Journal & { readonly fresh: boolean };

/** One durable place. `open()` opens the journal over it; close the previous one first. */
export interface JournalStore {
  open(): OpenedJournal;
  dispose(): void;
}

export interface ContractOptions {
  /** Runs of the reopen-equals-fold property; each run opens a fresh store. */
  readonly propertyRuns: number;
}

const MAX = Number.MAX_SAFE_INTEGER;
const APPLIED: Outcome = { kind: "applied", applied: { position: 40 } };
const REJECTED: Outcome = { kind: "failed", code: "DEVICE_REJECTED", message: "exception 3", modbusCode: 3 };

const granted = (token: number, holder = "ctl-a"): JournalRecord => ({ type: "granted", holder, token });
const intent = (token: number, seq: number, set: Record<string, number> = { position: seq }, holder = "ctl-a"): JournalRecord => ({
  type: "intent",
  holder,
  token,
  seq,
  set,
});
const outcome = (token: number, seq: number, o: Outcome = APPLIED): JournalRecord => ({ type: "outcome", token, seq, outcome: o });
const on = (actuator: string, ...records: JournalRecord[]): JournalEntry[] => records.map((record) => ({ actuator, record }));

export function journalContract(name: string, makeStore: (recentLimit: number) => JournalStore, options: ContractOptions): void {
  describe(`Journal contract: ${name}`, () => {
    const stores: JournalStore[] = [];
    const open: OpenedJournal[] = [];
    afterEach(() => {
      for (const j of open.splice(0)) j.close();
      for (const s of stores.splice(0)) s.dispose();
    });

    /** A journal over a new store, loaded and ready to commit. */
    function start(recentLimit = 8): { store: JournalStore; journal: OpenedJournal } {
      const store = makeStore(recentLimit);
      stores.push(store);
      const journal = store.open();
      open.push(journal);
      journal.load();
      return { store, journal };
    }
    /** Closes `journal`, opens the store again and loads it: a restart. */
    function restart(store: JournalStore, journal: Journal): { journal: OpenedJournal; loaded: ReadonlyMap<string, DurableSnapshot> } {
      journal.close();
      const next = store.open();
      open.push(next);
      return { journal: next, loaded: next.load() };
    }

    it("starts fresh and empty, and is no longer fresh once reopened", () => {
      const { store, journal } = start();
      expect(journal.fresh).toBe(true);
      const again = restart(store, journal);
      expect(again.journal.fresh).toBe(false);
      expect(again.loaded.size).toBe(0);
    });

    it("raises highestGranted and the fence with each grant", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(1)));
      journal.commit(on("v1", granted(2, "ctl-b")));
      expect(restart(store, journal).loaded.get("v1")).toEqual({
        highestGranted: 2,
        lastGrantHolder: "ctl-b",
        fence: { token: 2, seq: null },
        recent: [],
      });
    });

    it("remembers who was granted the highest token; a token learned from a device has no holder", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(1), granted(2, "@gateway")));
      let loaded = restart(store, journal);
      expect(loaded.loaded.get("v1")?.lastGrantHolder).toBe("@gateway");
      loaded.journal.commit(on("v1", { type: "fenceObserved", token: 7, seq: null }));
      loaded = restart(store, loaded.journal);
      expect(loaded.loaded.get("v1")?.lastGrantHolder).toBeNull();
      loaded.journal.commit(on("v1", granted(8, "ctl-b")));
      expect(restart(store, loaded.journal).loaded.get("v1")?.lastGrantHolder).toBe("ctl-b");
    });

    it("records an intent, moves the fence to it, and attaches its outcome", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(1), intent(1, 0, { position: 10 })));
      journal.commit(on("v1", outcome(1, 0, APPLIED)));
      journal.commit(on("v1", intent(1, 1, { position: 20 })));
      journal.commit(on("v1", outcome(1, 1, REJECTED)));
      expect(restart(store, journal).loaded.get("v1")).toEqual({
        highestGranted: 1,
        lastGrantHolder: "ctl-a",
        fence: { token: 1, seq: 1 },
        recent: [
          { holder: "ctl-a", token: 1, seq: 0, set: { position: 10 }, outcome: APPLIED },
          { holder: "ctl-a", token: 1, seq: 1, set: { position: 20 }, outcome: REJECTED },
        ],
      });
    });

    it("keeps the first outcome and ignores outcomes of unknown commands", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(1), intent(1, 0), outcome(1, 0, APPLIED)));
      journal.commit(on("v1", outcome(1, 0, REJECTED), outcome(1, 7, REJECTED)));
      expect(restart(store, journal).loaded.get("v1")?.recent).toEqual([
        { holder: "ctl-a", token: 1, seq: 0, set: { position: 0 }, outcome: APPLIED },
      ]);
    });

    it("keeps only the newest recentLimit commands per actuator", () => {
      const { store, journal } = start(3);
      journal.commit(on("v1", granted(1)));
      for (let seq = 0; seq < 5; seq++) journal.commit(on("v1", intent(1, seq), outcome(1, seq)));
      journal.commit(on("v2", granted(1), intent(1, 0), outcome(1, 0)));
      journal.commit(on("v1", outcome(1, 0, REJECTED))); // pruned: nothing to attach to
      const { loaded } = restart(store, journal);
      expect(loaded.get("v1")?.recent.map((r) => r.seq)).toEqual([2, 3, 4]);
      expect(loaded.get("v2")?.recent.map((r) => r.seq)).toEqual([0]);
    });

    it("keeps everything across a close and reopen, for several actuators", () => {
      const { store, journal } = start();
      journal.commit([...on("v1", granted(1), intent(1, 0)), ...on("v2", granted(MAX - 1), intent(MAX - 1, MAX, { speed: -0.5 }))]);
      journal.commit([...on("v1", outcome(1, 0)), ...on("v2", outcome(MAX - 1, MAX))]);
      const first = restart(store, journal);
      const second = restart(store, first.journal);
      expect(second.loaded).toEqual(first.loaded);
      expect(second.loaded.get("v2")).toEqual({
        highestGranted: MAX - 1,
        lastGrantHolder: "ctl-a",
        fence: { token: MAX - 1, seq: MAX },
        recent: [{ holder: "ctl-a", token: MAX - 1, seq: MAX, set: { speed: -0.5 }, outcome: APPLIED }],
      });
    });

    it("records an intent without outcome as OUTCOME_UNKNOWN on reopen, durably", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(1), intent(1, 0)));
      const first = restart(store, journal);
      expect(first.loaded.get("v1")?.recent[0]?.outcome).toEqual(OUTCOME_LOST_IN_RESTART);
      // A late outcome cannot replace it: the restart already answered.
      first.journal.commit(on("v1", outcome(1, 0, APPLIED)));
      const second = restart(store, first.journal);
      expect(second.loaded.get("v1")?.recent[0]?.outcome).toEqual(OUTCOME_LOST_IN_RESTART);
    });

    it("never lowers a token when records arrive out of order", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(5), granted(3)));
      journal.commit(on("v1", intent(5, 2), intent(5, 1)));
      journal.commit(on("v1", { type: "fenceObserved", token: 4, seq: 9 }));
      journal.commit(on("v1", granted(5, "ctl-b")));
      let loaded = restart(store, journal);
      expect(loaded.loaded.get("v1")).toMatchObject({ highestGranted: 5, fence: { token: 5, seq: 2 } });
      // Arrival order is kept: the list is what applyRecord appended, not sorted.
      expect(loaded.loaded.get("v1")?.recent.map((r) => r.seq)).toEqual([2, 1]);
      loaded.journal.commit(on("v1", { type: "fenceObserved", token: 9, seq: null }));
      loaded = restart(store, loaded.journal);
      expect(loaded.loaded.get("v1")).toMatchObject({ highestGranted: 9, fence: { token: 9, seq: null } });
    });

    it("refuses a batch with an unstorable record and stores none of it", () => {
      const { store, journal } = start();
      journal.commit(on("v1", granted(1)));
      const bad: JournalRecord[] = [
        granted(1.5),
        granted(MAX + 1),
        granted(-1),
        intent(1, -1),
        intent(1, 0, { position: Number.NaN }),
        intent(1, 0, { position: Number.POSITIVE_INFINITY }),
        { type: "fenceObserved", token: 2, seq: 0.5 },
        { type: "outcome", token: 1, seq: 0, outcome: { kind: "weird" } as unknown as Outcome },
      ];
      for (const record of bad) {
        expect(() => journal.commit(on("v1", granted(2), intent(2, 0), record))).toThrow(RangeError);
      }
      expect(() => journal.commit([{ actuator: "", record: granted(3) }])).toThrow(RangeError);
      expect(restart(store, journal).loaded.get("v1")).toEqual({
        highestGranted: 1,
        lastGrantHolder: "ctl-a",
        fence: { token: 1, seq: null },
        recent: [],
      });
    });

    it("refuses commit before load and after close", () => {
      const store = makeStore(4);
      stores.push(store);
      const journal = store.open();
      open.push(journal);
      expect(() => journal.commit(on("v1", granted(1)))).toThrow(/before load/);
      journal.load();
      journal.commit([]); // nothing to make durable
      journal.close();
      expect(() => journal.commit(on("v1", granted(1)))).toThrow(/closed/);
      expect(() => journal.load()).toThrow(/closed/);
    });

    it(`after any reopens, load() equals the fold of applyRecord with afterRestart (${options.propertyRuns} runs)`, () => {
      fc.assert(
        fc.property(arbitraryRecentLimit, arbitrarySession, (recentLimit, steps) => {
          const store = makeStore(recentLimit);
          let journal = store.open();
          try {
            let model: ReadonlyMap<string, DurableSnapshot> = new Map();
            expect(journal.load()).toEqual(model);
            for (const step of steps) {
              if (step === "reopen") {
                journal.close();
                journal = store.open();
                model = restartAll(model);
                expect(journal.load()).toEqual(model);
              } else {
                journal.commit(step);
                model = foldEntries(model, step, recentLimit);
              }
            }
            journal.close();
            journal = store.open();
            expect(journal.load()).toEqual(restartAll(model));
          } finally {
            journal.close();
            store.dispose();
          }
        }),
        { numRuns: options.propertyRuns },
      );
    });
  });
}

// Small domains so that outcomes meet their intents and tokens collide; a few large values
// to check integers survive storage exactly.
const arbitraryCount = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 0, max: 6 }) },
  { weight: 1, arbitrary: fc.constantFrom(2 ** 31, 2 ** 32 + 1, MAX - 1, MAX) },
);
const arbitraryValue = fc.oneof(
  fc.integer({ min: -1000, max: 1000 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((x) => !Object.is(x, -0)),
);
const arbitraryPoints = fc.dictionary(fc.constantFrom("position", "speed", "mode"), arbitraryValue, { maxKeys: 3 });
const arbitraryOutcome: fc.Arbitrary<Outcome> = fc.oneof(
  arbitraryPoints.map((applied): Outcome => ({ kind: "applied", applied })),
  fc.record({
    kind: fc.constant("failed" as const),
    code: fc.constantFrom("DEVICE_REJECTED" as const, "DEVICE_ERROR" as const, "DEVICE_UNAVAILABLE" as const, "OUTCOME_UNKNOWN" as const),
    message: fc.string({ maxLength: 12 }),
  }),
);
const arbitraryHolder = fc.constantFrom("ctl-a", "ctl-b", "@gateway");
const arbitraryRecord: fc.Arbitrary<JournalRecord> = fc.oneof(
  fc.record({ type: fc.constant("granted" as const), holder: arbitraryHolder, token: arbitraryCount }),
  fc.record({
    type: fc.constant("intent" as const),
    holder: arbitraryHolder,
    token: arbitraryCount,
    seq: arbitraryCount,
    set: arbitraryPoints,
  }),
  fc.record({ type: fc.constant("outcome" as const), token: arbitraryCount, seq: arbitraryCount, outcome: arbitraryOutcome }),
  fc.record({ type: fc.constant("fenceObserved" as const), token: arbitraryCount, seq: fc.option(arbitraryCount) }),
);
const arbitraryEntry: fc.Arbitrary<JournalEntry> = fc.record({
  actuator: fc.constantFrom("v1", "v2", "damper-3"),
  record: arbitraryRecord,
});
const arbitrarySession: fc.Arbitrary<(readonly JournalEntry[] | "reopen")[]> = fc.array(
  fc.oneof(
    { weight: 6, arbitrary: fc.array(arbitraryEntry, { minLength: 1, maxLength: 5 }) },
    { weight: 1, arbitrary: fc.constant("reopen" as const) },
  ),
  { maxLength: 14 },
);
const arbitraryRecentLimit = fc.integer({ min: 0, max: 4 });
