// The V8 flags the daemon runs with, the one list of them. Every launch site puts them on
// node's command line (V8 sizes its heap at start-up; v8.setFlagsFromString later does not
// resize it):
//   config/fencegate.service  ExecStart=/usr/bin/node <flags> .../bin/fencegate.mjs daemon
//   package.json              "start": node <flags> bin/fencegate.mjs start
//   test/support/daemon.ts    DaemonProcess, which the tests and npm run bench start
//   test/chaos/harness.ts     the chaos run's daemons, from its own bundle
// test/deploy/node-flags.test.ts checks that the unit, the script and the docs carry exactly
// these. Why these sizes, measured: docs/deploy.md, "Memory".
//
// --max-old-space-size=256: V8 otherwise sizes the old generation from the machine's RAM (4 GB
//   on a 24 GB machine) and lets promoted garbage pile up towards that before collecting it:
//   under load with 64 actuators, old space 50 to 100 MB and 125 to 200 MB resident, against
//   30 to 40 MB of old space with the flag. The unit's MemoryMax=256M stops the process
//   before its old space could reach 256 MB anyway.
// --max-semi-space-size=4: the young generation's halves stay at 4 MB instead of growing to
//   16 MB each: less resident under load, for more frequent, smaller scavenges; large
//   enough that a command's short-lived objects die young instead of being promoted.
// Not --optimize-for-size (until issue 14): with commands off the disk's path it made the
//   garbage collector a quarter to a third of the daemon's main thread at 16 busy
//   actuators, and the daemon's CPU per command about 25 % higher, for 5 to 6 MB less
//   resident (docs/deploy.md, "Memory").
export const NODE_FLAGS = ["--max-semi-space-size=4", "--max-old-space-size=256"];
