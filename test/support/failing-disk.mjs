// Makes the daemon's disk fail on cue (node --import <this file's URL>?trigger=<path>&mode=hang|fail):
// every asynchronous fdatasync (the one each journal commit waits for) behaves normally until
// the file `trigger` exists; from then on it never returns (hang: a stalled disk) or returns EIO
// (fail). The start's synchronous syncs are untouched. Tests only (test/system/daemon/audit-async.test.ts).
import fs from "node:fs";

const params = new URL(import.meta.url).searchParams;
const trigger = params.get("trigger");
const mode = params.get("mode");
if (!trigger || (mode !== "hang" && mode !== "fail"))
  throw new Error(`failing-disk.mjs: needs trigger=<path> and mode=hang|fail, not ${params}`);
const realFdatasync = fs.fdatasync;
fs.fdatasync = (fd, callback) => {
  if (!fs.existsSync(trigger)) return realFdatasync(fd, callback);
  if (mode === "fail")
    return realFdatasync(fd, () => callback(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO", errno: -5 })));
  // hang: the callback never comes, as with a disk that stopped answering
};
