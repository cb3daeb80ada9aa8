/** The journal's contract (journal.ts) on the SQLite journal, on files in a temp dir. */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll } from "vitest";
import { openSqliteJournal } from "../../src/adapters/journal/sqlite.ts";
import { journalContract, type JournalStore } from "./journal.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-journal-contract-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let files = 0;

function sqliteStore(recentLimit: number): JournalStore {
  const file = path.join(root, `j${++files}.db`);
  return {
    open: () => openSqliteJournal({ path: file, recentLimit }),
    dispose: () => {
      for (const suffix of ["", "-wal", "-shm", "-mark"]) fs.rmSync(file + suffix, { force: true });
    },
  };
}

// Each run creates a file (~10 ms: three fsyncs and a rename) and fsyncs every commit: 17 ms
// a run on this machine when quiet, 30 ms when loaded, so 200 runs cost 3.5 to 6 s. The 1000-run fold property runs on the memory
// journal, which shares the reference; this one checks the SQLite one agrees with it.
journalContract("sqlite", sqliteStore, { propertyRuns: 200 });
