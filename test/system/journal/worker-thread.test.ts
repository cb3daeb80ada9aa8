/**
 * The journal in its writer thread (src/adapters/journal/worker-client.ts): the same
 * Journal contract as the SQLite journal it runs, errors that keep their class and code
 * across the thread, and a stall seen from the event loop while it lasts (a real frozen
 * disk: test/support/frozen-disk.ts, root only).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it, onTestFinished } from "vitest";
import { JournalThread } from "../../../src/adapters/journal/worker-client.ts";
import { JournalError, type JournalEntry } from "../../../src/shell/ports.ts";
import { loopExt4 } from "../../support/frozen-disk.ts";
import { journalContract, type JournalStore } from "../../contract/journal.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-thread-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let files = 0;
const newPath = (dir = root): string => path.join(dir, `j${++files}.db`);
const opened: JournalThread[] = [];
afterEach(() => {
  for (const j of opened.splice(0)) j.close();
});
function open(file: string, more: Partial<ConstructorParameters<typeof JournalThread>[0]> = {}): JournalThread {
  const j = new JournalThread({ path: file, recentLimit: 8, stallReportMs: 200, ...more });
  opened.push(j);
  return j;
}
const grant = (token: number, actuator = "v1"): JournalEntry[] => [{ actuator, record: { type: "granted", holder: "ctl-a", token } }];

// A thread per open (0.3 to 1 s to start from the sources, tsx compiling in each): fewer runs than sqlite.test.ts, which checks the same journal more.
journalContract(
  "sqlite in its writer thread",
  (recentLimit): JournalStore => {
    const file = newPath();
    return {
      open: () => new JournalThread({ path: file, recentLimit, stallReportMs: 1000 }),
      dispose: () => {
        for (const suffix of ["", "-wal", "-shm", "-mark", ".lock"]) fs.rmSync(file + suffix, { force: true });
      },
    };
  },
  { propertyRuns: 3 },
);

describe("JournalThread", () => {
  it("commits made asynchronously are durable, in order, and read back by the next open", async () => {
    const file = newPath();
    const j = open(file);
    expect(j.fresh).toBe(true);
    expect(j.load().size).toBe(0);
    await Promise.all([grant(1), grant(2, "v2"), grant(3)].map((entries) => j.commitAsync(entries)));
    expect(j.unsynced).toBe(0);
    j.close();
    const again = open(file);
    expect(again.fresh).toBe(false);
    expect([...again.load()].map(([id, s]) => [id, s.highestGranted])).toEqual([
      ["v1", 3],
      ["v2", 2],
    ]);
  });

  it("a second gateway on the same journal is refused with the journal's own JournalError and sentence", () => {
    const file = newPath();
    open(file).load();
    let refused: unknown;
    try {
      open(file, { busyTimeoutMs: 50 });
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(JournalError);
    expect(refused).toMatchObject({
      code: "JOURNAL_UNREADABLE",
      message: expect.stringMatching(/is in use by another process .*Is another fencegate running on this journal\?/),
    });
  });

  it("a record that cannot be stored is refused as a RangeError naming the field, and the journal refuses commits after it", async () => {
    const j = open(newPath());
    j.load();
    await expect(j.commitAsync([{ actuator: "v1", record: { type: "granted", holder: "ctl-a", token: -1 } }])).rejects.toThrow(RangeError);
    await expect(j.commitAsync(grant(1))).rejects.toThrow(/token -1 is not an integer/);
    expect(j.problem()).toMatch(/^a commit failed: journal entry 0 \(granted for "v1"\) cannot be stored: token -1/);
  });
});

// A real frozen disk needs root (loop mount, fsfreeze): without it, null and these are skipped.
const disk = loopExt4("thread");
afterAll(() => disk?.remove());

describe.skipIf(disk === null)("JournalThread on a disk that stops answering", () => {
  afterEach(() => disk?.thaw());

  it("reports the stall while it lasts, the event loop running meanwhile, and the commit completes after the thaw", async () => {
    const j = open(newPath(disk!.dir), { stallReportMs: 300 });
    j.load();
    await j.commitAsync(grant(1));
    disk!.freeze();
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 10);
    onTestFinished(() => clearInterval(ticker));
    let done = false;
    const commit = j.commitAsync(grant(2)).then(() => (done = true));
    await new Promise((r) => setTimeout(r, 200));
    expect(j.problem()).toBeNull(); // not yet stallReportMs
    await new Promise((r) => setTimeout(r, 300));
    expect(j.problem()).toMatch(/^a commit to .* has not come back from the disk for 0\.[5-9] s: the disk has stalled/);
    expect(done).toBe(false);
    expect(ticks).toBeGreaterThan(25); // the loop ran all along: 500 ms of 10 ms ticks, give or take a busy machine
    await disk!.thaw();
    await commit;
    expect(j.problem()).toBeNull();
  });
});
