// Emulates a slow disk for the benchmark's daemon (node --import <this file's URL>?syncMs=N):
// every asynchronous fdatasync, the one each journal commit waits for, returns N ms after
// the real one, as on a Raspberry Pi's SD card (milliseconds to tens of milliseconds, as
// docs/deploy.md §8 notes). Like the line-rate emulation of the shared bus, it makes
// this machine's fast disk behave like the target's, so group commit can be measured where
// it matters. It never runs outside the benchmark and the tests (test/system/daemon/shown-durable.test.ts
// holds each commit back long enough to look at what the gateway shows meanwhile).
import fs from "node:fs";

const syncMs = Number(new URL(import.meta.url).searchParams.get("syncMs"));
if (!Number.isFinite(syncMs) || syncMs < 0) throw new Error(`slow-disk.mjs: syncMs must be a number of milliseconds ≥ 0, not ${syncMs}`);
const realFdatasync = fs.fdatasync;
fs.fdatasync = (fd, callback) => realFdatasync(fd, (err) => setTimeout(() => callback(err), syncMs));
