/**
 * The child of writer-lock.test.ts: a second process holding the journal, as a running
 * daemon does. Opens and loads it, grants `valve-1` token 1, says `ready`, and keeps the
 * journal open until its stdin closes.
 *
 * Usage: node --import tsx holder-child.ts <journal>
 */
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";

const file = process.argv[2];
if (file === undefined) throw new Error("usage: holder-child.ts <journal>");
const journal = openSqliteJournal({ path: file, recentLimit: 8 });
journal.load();
journal.commit([{ actuator: "valve-1", record: { type: "granted", holder: "ctl-a", token: 1 } }]);
process.stdout.write("ready\n");
process.stdin.resume();
process.stdin.on("end", () => {
  journal.close();
  process.exit(0);
});
