/**
 * `fencegate <command>`: one entry point for every tool the project ships.
 * Each subcommand lives in its own module and is loaded only when asked for, so `fencegate
 * sim` does not pay for the daemon's imports and vice versa.
 */
type Subcommand = (argv: string[]) => Promise<number>;

const SUBCOMMANDS: Record<string, { summary: string; load: () => Promise<Subcommand> }> = {
  daemon: {
    summary: "run the gateway: Modbus buses, the MQTT API, the journal (--config FILE)",
    load: async () => (await import("./daemon.ts")).main,
  },
  sim: {
    summary: "run the simulated actuator (fenced or plain Modbus profile) on a serial device or TCP",
    load: async () => (await import("../../firmware-bridge/src/cli.ts")).main,
  },
};

function usage(): string {
  const lines = Object.entries(SUBCOMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return ["usage: fencegate <command> [options]", "", "commands:", ...lines, "", "Run `fencegate <command> --help` for a command's options."].join("\n");
}

async function run(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return name === undefined ? 64 : 0;
  }
  const sub = SUBCOMMANDS[name];
  if (!sub) {
    console.error(`fencegate: unknown command "${name}"\n\n${usage()}`);
    return 64;
  }
  return (await sub.load())(rest);
}

process.exitCode = await run(process.argv.slice(2));
