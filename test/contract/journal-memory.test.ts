import { describe, expect, it } from "vitest";
import { MemoryJournal } from "../../src/adapters/journal/memory.ts";
import { journalContract, type JournalStore } from "./journal.ts";

function memoryStore(recentLimit: number): JournalStore {
  let last: MemoryJournal | null = null;
  return {
    open: () => (last = last === null ? new MemoryJournal({ recentLimit }) : last.crash()),
    dispose: () => {},
  };
}

journalContract("memory", memoryStore, { propertyRuns: 1000 });

describe("MemoryJournal.crash", () => {
  it("keeps every commit, counts them, and retires the crashed instance", () => {
    const journal = new MemoryJournal({ recentLimit: 4 });
    journal.load();
    journal.commit([{ actuator: "v1", record: { type: "granted", holder: "ctl-a", token: 1 } }]);
    journal.commit([{ actuator: "v1", record: { type: "intent", holder: "ctl-a", token: 1, seq: 0, set: { position: 1 } } }]);
    expect(journal.commitCount).toBe(2);
    const after = journal.crash();
    expect(after.fresh).toBe(false);
    expect(() => journal.commit([])).toThrow(/crashed/);
    expect(after.load().get("v1")).toMatchObject({
      highestGranted: 1,
      fence: { token: 1, seq: 0 },
      recent: [{ outcome: { code: "OUTCOME_UNKNOWN" } }],
    });
  });
});
