// The V8 flags the daemon runs with, the one list of them. Every launch site puts them on
// node's command line (V8 sizes its heap at start-up; v8.setFlagsFromString later does not
// resize it):
//   config/fencegate.service  ExecStart=/usr/bin/node <flags> .../bin/fencegate.mjs daemon
//   package.json              "start": node <flags> bin/fencegate.mjs start
//   test/support/daemon.ts    DaemonProcess, which the tests and npm run bench start
//   test/system/chaos/harness.ts     the chaos run's daemons, from its own bundle
// test/system/deploy/node-flags.test.ts checks that the unit, the script and the docs carry exactly
// these. Why these sizes, measured: docs/deploy.md, "Memory".
//
// --max-old-space-size=256: V8 otherwise sizes the old generation from the machine's RAM (4 GB
//   on a 24 GB machine) and lets promoted garbage pile up towards that before collecting it:
//   under load with 64 actuators, old space 50 to 100 MB and 125 to 200 MB resident, against
//   30 to 40 MB of old space with the flag. The unit's MemoryMax=256M stops the process
//   before its old space could reach 256 MB anyway.
// --max-semi-space-size=2: the young generation's halves stay at 2 MB instead of growing to
//   16 MB each: 30 MB less resident under load, for more frequent, smaller scavenges.
// --optimize-for-size: small semi-spaces promote the short-lived objects of commands in
//   flight, and V8 let them pile up in the old space for seconds (64 actuators under load
//   for 5 s: 125 MB resident); with it, 108 MB, for ~15 % fewer commands/s at saturation
//   (thousands per second, far above what a plant's actuators ask for). Since commands stopped waiting for the disk it is
//   most of the garbage collector's cost, about a fifth of the daemon's CPU per command at
//   16 busy actuators; without it Node 24 reaches the 120 MB bound (docs/deploy.md, "Memory").
export const NODE_FLAGS = ["--max-semi-space-size=2", "--max-old-space-size=256", "--optimize-for-size"];
