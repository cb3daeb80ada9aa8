/**
 * The journal's worker thread: it owns the only SQLite connection (and so the exclusive
 * lock) from open to close, and does everything on it: open, load, every commit (and its
 * fsync), close. See worker.ts for the main thread's side and worker-protocol.ts for the
 * messages.
 */
import { workerData as data } from "node:worker_threads";
import type { SqliteJournal } from "./sqlite.ts";
import { openSqliteJournal } from "./sqlite.ts";
import type { CommitAck, Request, SerializedError, SyncReply, WorkerData } from "./worker-protocol.ts";
import { serializeError } from "./worker-protocol.ts";

const { options, port, syncPort, signal } = data as WorkerData;
const replies = new Int32Array(signal);

function answer(reply: SyncReply): void {
  syncPort.postMessage(reply);
  Atomics.add(replies, 0, 1);
  Atomics.notify(replies, 0);
}

let journal: SqliteJournal | null = null;
/** The first async commit failure: every later commit is refused with it. */
let poisoned: SerializedError | null = null;

try {
  journal = openSqliteJournal(options);
  answer({ ok: true, fresh: journal.fresh });
} catch (error) {
  answer({ ok: false, error: serializeError(error) });
}

port.on("message", (request: Request) => {
  switch (request.op) {
    case "commit": {
      let ack: CommitAck;
      if (poisoned !== null) ack = { id: request.id, error: poisoned };
      else {
        try {
          journal!.commit(request.entries); // one transaction; returns after fsync
          ack = { id: request.id };
        } catch (error) {
          poisoned = serializeError(error);
          ack = { id: request.id, error: poisoned };
        }
      }
      port.postMessage(ack);
      break;
    }
    case "commitSync":
      if (poisoned !== null) return answer({ ok: false, error: poisoned });
      sync(() => (journal!.commit(request.entries), { ok: true }));
      break;
    case "load":
      sync(() => ({ ok: true, snapshots: journal!.load() }));
      break;
    case "settings":
      sync(() => ({ ok: true, settings: journal!.settings() }));
      break;
    case "close":
      sync(() => (journal?.close(), { ok: true }));
      port.close();
      syncPort.close();
      break;
  }
});

function sync(fn: () => SyncReply): void {
  let reply: SyncReply;
  try {
    reply = fn();
  } catch (error) {
    reply = { ok: false, error: serializeError(error) };
  }
  answer(reply);
}
