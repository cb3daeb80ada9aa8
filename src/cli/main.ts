/**
 * `fencegate <command>`: one entry point for every tool the project ships.
 * Each subcommand lives in its own module and is loaded only when asked for, so `fencegate
 * sim` does not pay for the daemon's imports and vice versa.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PACKAGE_ROOT } from "../package-root.ts";
import { sqliteProblem } from "./sqlite.ts";
import { EXIT } from "../exit-codes.ts";

type Subcommand = (argv: string[]) => Promise<number>;

const controller = async () => (await import("./controller.ts")).runController;

/** `sqlite`: the command opens the journal, so SQLite must load (see ./sqlite.ts). */
const SUBCOMMANDS: Record<string, { summary: string; load: () => Promise<Subcommand>; passName?: boolean; sqlite?: boolean }> = {
  demo: {
    summary: "replay a paused controller's stale write: applied without fencing, refused through fencegate",
    load: async () => (await import("../dev/demo.ts")).main,
    sqlite: true,
  },
  start: {
    summary: "the gateway on its embedded defaults: local or embedded broker, simulated actuator",
    load: async () => (await import("./start.ts")).main,
    sqlite: true,
  },
  daemon: {
    summary: "run the gateway: Modbus buses, the MQTT API, the journal (--config FILE)",
    load: async () => (await import("./daemon.ts")).main,
    sqlite: true,
  },
  doctor: {
    summary: "check a configuration and this machine: serial ports, broker, journal, clock (--config FILE)",
    load: async () => (await import("./doctor.ts")).main,
  },
  journal: {
    summary:
      "journal init|recover|leave-group --config FILE: create the journal; token floors above anything ever granted, after lost history; start alone a journal that served in a gateway group",
    load: async () => (await import("./journal.ts")).main,
    sqlite: true,
  },
  sim: {
    summary: "run the simulated actuator (fenced or plain Modbus profile) on a serial device or TCP",
    load: async () => (await import("../../firmware-bridge/src/cli.ts")).main,
  },
  lease: { summary: "lease acquire|renew|release ACTUATOR: take, keep or give back a lease", load: controller, passName: true },
  send: { summary: "send ACTUATOR POINT=VALUE --token N: command under a lease", load: controller, passName: true },
  read: { summary: "read ACTUATOR: device state, lease and fence, fresh", load: controller, passName: true },
  status: { summary: "a table of every actuator: holder, token, fence, online, points", load: controller, passName: true },
  watch: { summary: "watch ACTUATOR: follow states and decisions live", load: controller, passName: true },
  log: {
    summary: "log ACTUATOR: its audit trail from the journal (--since, --holder, --outcome); safe while the daemon runs",
    load: async () => (await import("./log.ts")).main,
    sqlite: true,
  },
};

function usage(): string {
  const lines = Object.entries(SUBCOMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return [
    "usage: fencegate <command> [options]",
    "",
    "commands:",
    ...lines,
    "",
    "Run `fencegate <command> --help` for a command's options and examples; `fencegate --version` for the version.",
  ].join("\n");
}

function version(): string {
  const { version } = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { version: string };
  return `fencegate ${version} (Node ${process.versions.node})`;
}

async function run(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return name === undefined ? EXIT.USAGE : EXIT.OK;
  }
  if (name === "--version" || name === "-V" || name === "version") {
    console.log(version());
    return 0;
  }
  const sub = SUBCOMMANDS[name];
  if (!sub) {
    console.error(`fencegate: unknown command "${name}". Run \`fencegate --help\` for the commands.`);
    return EXIT.USAGE;
  }
  const problem = sub.sqlite === true && !rest.some((a) => a === "--help" || a === "-h") ? sqliteProblem() : null;
  if (problem !== null) {
    console.error(problem);
    return EXIT.CONFIG;
  }
  return (await sub.load())(sub.passName ? argv : rest);
}

const code = await run(process.argv.slice(2));
// Writes to a pipe are asynchronous: let them drain, or the last lines (often the error
// that explains the exit code) are lost.
await Promise.all([process.stdout, process.stderr].map((stream) => new Promise((resolve) => stream.write("", resolve))));
// Exit explicitly: a client left reconnecting to an absent broker must not keep the CLI alive.
process.exit(code);
