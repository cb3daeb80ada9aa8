/**
 * The child of sqlite-fsync.test.ts, run under strace: makes COMMITS pipelined commits with
 * commitAsync and marks each on stdout (`pending k` before it, `durable k` when its promise
 * resolves) with single write(2) calls that strace shows in order with the journal's own
 * system calls.
 *
 * Usage: node --import tsx fsync-child.ts <journal> <commits> <checkpointEveryCommits>
 */
import fs from "node:fs";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";

const [file, countText, everyText] = process.argv.slice(2);
if (file === undefined || countText === undefined || everyText === undefined)
  throw new Error("usage: fsync-child.ts <journal> <commits> <checkpointEveryCommits>");
const journal = openSqliteJournal({ path: file, recentLimit: 16, checkpointEveryCommits: Number(everyText) });
journal.load();
journal.commit([{ actuator: "v1", record: { type: "granted", holder: "ctl-a", token: 1 } }]);
const all: Promise<void>[] = [];
for (let k = 0; k < Number(countText); k++) {
  fs.writeSync(1, `pending ${k}\n`);
  all.push(
    journal
      .commitAsync([{ actuator: "v1", record: { type: "intent", holder: "ctl-a", token: 1, seq: k, set: { position: k } } }])
      .then(() => void fs.writeSync(1, `durable ${k}\n`)),
  );
  if (k % 3 === 2) await all.at(-1); // some commits alone, some pipelined behind a sync in flight
}
await Promise.all(all);
journal.close();
