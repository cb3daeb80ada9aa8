/**
 * The `fencegate` operator commands run as subprocesses against the real daemon, a real
 * Mosquitto and the simulated valves: human output, --json, and the exit code classes.
 * They run the CLI bundled from the sources, as `npm run build` ships it: some fifty starts
 * through tsx cost over a minute of CPU here. The tsx path (bin/fencegate.mjs with no build)
 * is what the first-hour, runner and README tests start.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type SimulatorHandle } from "../../../firmware-bridge/src/simulator.ts";
import { embeddedBroker } from "../../../src/dev/broker.ts";
import { bundleCli, type CliBundle } from "../../support/bundle.ts";
import { DaemonProcess, gatewayConfig, valve } from "../../support/daemon.ts";
import { startMosquitto, type Broker } from "../../support/mosquitto.ts";
import { runFencegate, startFencegate, type Run } from "../../support/processes.ts";
import { Teardown } from "../../support/stack.ts";
import { TopicWatcher } from "../../support/watch.ts";

let dir: string;
let broker: Broker;
let sim: SimulatorHandle;
let daemon: DaemonProcess;
let bundle: CliBundle;
/** Stops the watch processes a failing test leaves running. */
const teardown = new Teardown();

async function cli(...args: string[]): Promise<Run> {
  return cliWith({ FENCEGATE_BROKER: broker.url }, ...args);
}

/** The seq counters of `send` without --seq: in the test's directory, never the user's own. */
const stateDir = () => join(dir, "state");

async function cliWith(env: Record<string, string>, ...args: string[]): Promise<Run> {
  return runFencegate(args, { bin: bundle.bin, env: { FENCEGATE_STATE_DIR: stateDir(), ...env }, timeoutMs: 30_000 });
}

const json = (r: Run) => JSON.parse(r.stdout);

/** `fencegate watch ACTUATOR` running: `seen(pattern)` resolves once its output matches, and fails with the output if it does not within 15 s. */
function watchOutput(actuator: string) {
  const child = startFencegate(teardown, ["watch", actuator], { bin: bundle.bin, env: { FENCEGATE_BROKER: broker.url } });
  let output = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
  const seen = (pattern: RegExp) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`watch did not print ${pattern} within 15 s; it printed:\n${output}`)), 15_000);
      const check = () => pattern.test(output) && (clearTimeout(timer), resolve());
      child.stdout!.on("data", check);
      child.once("exit", (code) => reject(new Error(`watch exited ${code}: ${output}`)));
      check();
    });
  return { seen, output: () => output, stop: () => child.kill("SIGINT") };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-cli-"));
  bundle = await bundleCli();
  broker = await startMosquitto();
  sim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, units: [1, 2, 3], rate: 0 });
  daemon = DaemonProcess.start(
    dir,
    gatewayConfig({
      brokerUrl: broker.url,
      journalPath: join(dir, "journal.db"),
      buses: { sim: { type: "tcp", host: "127.0.0.1", port: sim.tcp!.port, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2), valve("valve-3", "sim", 3)],
    }),
    { bin: bundle.bin },
  );
  await daemon.ready(["valve-1", "valve-2", "valve-3"]);
});

afterAll(async () => {
  await teardown.run();
  await daemon?.kill("SIGTERM");
  await sim?.close();
  await broker?.stop();
  bundle?.remove();
  rmSync(dir, { recursive: true, force: true });
});

describe("fencegate CLI", () => {
  it("takes, uses, renews and gives back a lease (human output)", async () => {
    const acquired = await cli("lease", "acquire", "valve-1", "--ttl-ms", "30000", "--holder", "ops-1");
    expect(acquired).toMatchObject({
      code: 0,
      stdout: "valve-1: lease granted to ops-1, token 1, ttl 30000 ms (renew before it runs out)\n",
    });
    const sent = await cli("send", "valve-1", "position=33.3", "--token", "1", "--seq", "5", "--holder", "ops-1");
    expect(sent).toMatchObject({ code: 0, stdout: "valve-1: applied position=33.3 (token 1, seq 5)\n" });
    expect(sim.device(1).targetPosition).toBe(33.3);
    expect(await cli("lease", "renew", "valve-1", "--token", "1", "--holder", "ops-1")).toMatchObject({
      code: 0,
      stdout: "valve-1: lease 1 renewed for 30000 ms\n",
    });
    expect(await cli("lease", "release", "valve-1", "--token", "1", "--holder", "ops-1")).toMatchObject({
      code: 0,
      stdout: "valve-1: lease 1 released\n",
    });
  });

  it("prints JSON for scripts", async () => {
    const acquired = await cli("lease", "acquire", "valve-2", "--ttl-ms", "30000", "--holder", "ops-2", "--json");
    expect(acquired.code).toBe(0);
    const { token } = json(acquired);
    expect(json(acquired)).toEqual({ ok: true, actuator: "valve-2", holder: "ops-2", token, ttlMs: 30000 });
    const sent = await cli(
      "send",
      "valve-2",
      "position=10",
      "speed=1",
      "--token",
      String(token),
      "--seq",
      "1",
      "--holder",
      "ops-2",
      "--json",
    );
    expect(sent.code).toBe(5);
    expect(json(sent)).toMatchObject({ ok: false, error: { code: "UNKNOWN_POINT" } });
    const ok = await cli("send", "valve-2", "position=10", "--token", String(token), "--holder", "ops-2", "--json");
    expect(json(ok)).toMatchObject({ ok: true, actuator: "valve-2", token, applied: { position: 10 } });
    expect(json(ok).seq).toBe(1); // default seq: the counter's first for this holder and token
    const read = await cli("read", "valve-2", "--json");
    expect(json(read)).toMatchObject({
      ok: true,
      actuator: "valve-2",
      online: true,
      lease: { holder: "ops-2", token },
      points: { position: 10 },
    });
  });

  it("reads state for people", async () => {
    const read = await cli("read", "valve-3");
    expect(read.code).toBe(0);
    expect(read.stdout).toMatch(
      /^valve-3: online\n {2}lease {2}free\n {2}fence {2}token \d+, seq .+\n {2}points actual=\d+ position=\d+ status=\d+\n$/,
    );
  });

  it("lists every actuator in status, as a table and as JSON", async () => {
    const table = await cli("status");
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^ACTUATOR\s+ONLINE\s+HOLDER\s+TOKEN\s+FENCE\s+POINTS$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/)[0])).toEqual(["valve-1", "valve-2", "valve-3"]);
    const status = json(await cli("status", "--json"));
    expect(status.ok).toBe(true);
    const rows = status.actuators;
    expect(rows.map((r: { actuator: string }) => r.actuator)).toEqual(["valve-1", "valve-2", "valve-3"]);
  });

  it("follows states and decisions with watch", async () => {
    const watch = startFencegate(teardown, ["watch", "valve-3", "--json", "--count", "3"], {
      bin: bundle.bin,
      env: { FENCEGATE_BROKER: broker.url },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    const exited = new Promise<number | null>((resolve) => watch.once("close", (code) => resolve(code)));
    // Its first line is the retained state, printed once it subscribed: only then is there a
    // decision for it to follow. (A fixed 1.5 s wait was both slow and, on a loaded machine,
    // sometimes too short for Node to start.) The events subscription follows the state's
    // by one round trip to the broker, far less than the acquiring CLI takes to start.
    await new Promise<void>((resolve) =>
      watch.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk;
        if (stdout.includes("\n")) resolve();
      }),
    );
    await cli("lease", "acquire", "valve-3", "--ttl-ms", "5000", "--holder", "ops-3");
    expect(await exited).toBe(0);
    const items = stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(items[0].kind).toBe("state");
    expect(items.map((i: { kind: string; event?: { type: string } }) => i.event?.type)).toContain("granted");
  });

  it.each([
    ["a refusal by the fence: 2", ["send", "valve-1", "position=1", "--token", "1", "--seq", "9", "--holder", "late"], 2, "STALE_TOKEN"],
    ["an invalid request: 5", ["send", "valve-1", "position=101", "--token", "1", "--seq", "9", "--holder", "late"], 5, "OUT_OF_RANGE"],
    ["an unknown actuator: 5", ["read", "no-such-valve"], 5, "UNKNOWN_ACTUATOR"],
  ])("exits with the class of the outcome: %s", async (_name, args, code, error) => {
    if (error === "STALE_TOKEN") await cli("lease", "acquire", "valve-1", "--ttl-ms", "5000", "--holder", "newer"); // token 2 now
    const run = await cli(...args);
    expect(run.code).toBe(code);
    expect(run.stderr).toContain(`${error}: `);
  });

  it("exits 3 when the device's answer is lost (outcome unknown)", async () => {
    const { token } = json(await cli("lease", "acquire", "valve-2", "--ttl-ms", "5000", "--holder", "ops-2", "--json"));
    sim.dropResponses(1, 2, 16);
    const run = await cli("send", "valve-2", "position=20", "--token", String(token), "--holder", "ops-2");
    expect(run.code).toBe(3);
    expect(run.stderr).toContain("OUTCOME_UNKNOWN");
  });

  it("exits 4 when the broker cannot be reached", async () => {
    const run = await cli("status", "--broker", "mqtt://127.0.0.1:1", "--timeout-ms", "500");
    expect(run.code).toBe(4);
    expect(run.stderr).toContain("no answer");
  });

  it("exits 64 on a usage error, with the command's help", async () => {
    const run = await cli("send", "valve-1", "position=abc", "--token", "1");
    expect(run.code).toBe(64);
    expect(run.stderr).toContain('"position=abc" is not point=number');
    expect(run.stderr).toContain("usage: fencegate send");
  });

  it("has --help with examples on every command", async () => {
    const commands = [
      ["lease", "acquire"],
      ["lease", "renew"],
      ["lease", "release"],
      ["send"],
      ["read"],
      ["status"],
      ["watch"],
      ["daemon"],
      ["sim"],
      ["start"],
      ["demo"],
    ];
    const runs: Run[] = [];
    for (let i = 0; i < commands.length; i += 3)
      runs.push(...(await Promise.all(commands.slice(i, i + 3).map((c) => cli(...c, "--help")))));
    runs.forEach((run, i) => {
      expect(run.code, commands[i]!.join(" ")).toBe(0);
      expect(run.stdout, commands[i]!.join(" ")).toMatch(/usage: fencegate/);
    });
    for (const run of runs.slice(0, 8)) expect(run.stdout).toMatch(/example/);
    const top = await cli("--help");
    expect(top.stdout).toMatch(/commands:/);
  });

  it("prints its version with --version", async () => {
    const { version } = JSON.parse(readFileSync(join(import.meta.dirname, "../../../package.json"), "utf8"));
    const run = await cli("--version");
    expect(run).toMatchObject({ code: 0, stdout: `fencegate ${version} (Node ${process.versions.node})\n` });
  });

  it("lists the lease commands with lease --help; lease alone is a usage error", async () => {
    const help = await cli("lease", "--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/lease acquire .*\n.*lease renew .*\n.*lease release /);
    const bare = await cli("lease");
    expect(bare.code).toBe(64);
    expect(bare.stderr).toContain("usage: fencegate lease <acquire|renew|release>");
  });

  it.each([
    ["an empty value", "speed= "],
    ["nothing after =", "speed="],
    ["hexadecimal", "speed=0x1F"],
    ["binary", "speed=0b11"],
    ["an exponent", "speed=1e3"],
    ["infinity", "speed=Infinity"],
  ])("refuses %s as a value: usage error 64, in three lines", async (_name, pair) => {
    const run = await cli("send", "valve-1", pair, "--token", "1", "--holder", "ops-1");
    expect(run.code).toBe(64);
    expect(run.stderr).toBe(
      `fencegate send: "${pair}" is not point=number (a decimal number, such as position=42.5 or offset=-3)\nusage: fencegate send ACTUATOR POINT=VALUE... --token N [--seq N] [--deadline-ms N]\nRun \`fencegate send --help\` for the options and examples.\n`,
    );
  });

  it("refuses a holder with a space: usage error 64 naming the allowed characters", async () => {
    const run = await cli("lease", "acquire", "valve-1", "--ttl-ms", "1000", "--holder", "op 1");
    expect(run.code).toBe(64);
    expect(run.stderr.split("\n")[0]).toBe(
      'fencegate lease acquire: holder "op 1" is not allowed: 1 to 128 characters of A-Z a-z 0-9 . _ : - (no spaces)',
    );
  });

  it("keeps usage errors short: an unknown option, an unknown command", async () => {
    const option = await cli("read", "valve-1", "--colour", "red");
    expect(option.code).toBe(64);
    expect(option.stderr.trim().split("\n")).toHaveLength(3);
    const command = await cli("lease", "take", "valve-1");
    expect(command.code).toBe(64);
    expect(command.stderr).toMatch(/^fencegate lease: unknown command "take"\n/);
    const top = await cli("frobnicate");
    expect(top).toMatchObject({ code: 64, stderr: 'fencegate: unknown command "frobnicate". Run `fencegate --help` for the commands.\n' });
  });

  it("says at once that watch names an unknown actuator, from what the gateways announce, long before its reply timeout", async () => {
    // The time counts the CLI's own start (a second or two under load), so it is judged against
    // the reply timeout it was given: waiting for a reply would take all of it.
    const timeoutMs = 30_000;
    const started = performance.now();
    const run = await cli("watch", "valve-9", "--timeout-ms", String(timeoutMs));
    expect(run.code).toBe(5);
    expect(run.stderr).toContain("UNKNOWN_ACTUATOR");
    expect(performance.now() - started).toBeLessThan(timeoutMs / 2);
  });

  it("shows the applied values in watch", async () => {
    const { token } = json(await cli("lease", "acquire", "valve-3", "--ttl-ms", "30000", "--holder", "ops-9", "--json"));
    const watch = watchOutput("valve-3");
    try {
      await watch.seen(/^\[state\] valve-3: online/m); // subscribed: the retained state came first
      expect((await cli("send", "valve-3", "position=12.5", "--token", String(token), "--seq", "1", "--holder", "ops-9")).code).toBe(0);
      await watch.seen(/ applied +position=12.5 holder=ops-9 token=\d+ seq=1$/m);
    } finally {
      watch.stop();
      await cli("lease", "release", "valve-3", "--token", String(token), "--holder", "ops-9");
    }
  });

  it("says refused in watch for a refused command, as the status page does", async () => {
    const { token } = json(await cli("lease", "acquire", "valve-3", "--ttl-ms", "30000", "--holder", "ops-8", "--json"));
    const watch = watchOutput("valve-3");
    try {
      await watch.seen(/^\[state\] valve-3: online/m);
      expect((await cli("send", "valve-3", "position=12.5", "--token", String(token), "--seq", "1", "--holder", "ops-7")).code).not.toBe(0);
      await watch.seen(/ refused +holder=ops-7 token=\d+ seq=1 code=NOT_HOLDER$/m);
      expect(watch.output()).not.toMatch(/rejected/);
    } finally {
      watch.stop();
      await cli("lease", "release", "valve-3", "--token", String(token), "--holder", "ops-8");
    }
  });
});

describe("fencegate CLI without a gateway", () => {
  it("says within two seconds of asking that no gateway is online (exit 4)", async () => {
    const lonely = await startMosquitto();
    // The promise is about the wait after the request is out (1 s for a reply, then 0.5 s for
    // a gateway's retained status), not about starting Node and loading the CLI, which takes
    // over a second on a loaded machine: time it from the request on the wire to the sentence.
    const wire = await TopicWatcher.connect(lonely.url, ["fencegate/#"]);
    try {
      const askedAt = wire.waitFor((m) => !m.retain, { timeoutMs: 30_000, what: "the CLI's request" }).then(() => performance.now());
      const child = startFencegate(teardown, ["read", "valve-1"], {
        bin: bundle.bin,
        env: { FENCEGATE_BROKER: lonely.url },
        stdio: ["ignore", "ignore", "pipe"],
      });
      let stderr = "";
      let saidAt = 0;
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
        saidAt ||= performance.now();
        stderr += chunk;
      });
      const code = await new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
      expect(code).toBe(4);
      expect(stderr).toBe(
        `no answer: no fencegate gateway is online on ${lonely.url} (nothing says online on fencegate/gateway/+/status): start the daemon, or check --broker and --base\n`,
      );
      expect(saidAt - (await askedAt)).toBeLessThan(2000);
    } finally {
      await wire.close();
      await lonely.stop();
    }
  });

  it("falls back to MQTT 3.1.1 by itself on a broker that refuses MQTT 5 (the embedded one)", async () => {
    const aedes = await embeddedBroker();
    try {
      const run = await cliWith({ FENCEGATE_BROKER: aedes.url }, "status", "--json");
      expect(run).toMatchObject({ code: 0, stdout: '{"ok":true,"actuators":[]}\n' });
    } finally {
      await aedes.close();
    }
  });
});

describe("fencegate CLI: what an operator types wrong or leaves out", () => {
  const SEND_USAGE = "usage: fencegate send ACTUATOR POINT=VALUE... --token N [--seq N] [--deadline-ms N]";

  it.each([
    ["--broker", { FENCEGATE_BROKER: "mqtt://127.0.0.1:1883" }, ["--broker", "notaurl"]],
    ["FENCEGATE_BROKER", { FENCEGATE_BROKER: "notaurl" }, []],
    ["--broker", { FENCEGATE_BROKER: "mqtt://127.0.0.1:1883" }, ["--broker", "http://127.0.0.1:1883"]],
  ])("refuses a broker that is not an MQTT URL: usage error 64 naming %s", async (source, env, flags) => {
    const run = await cliWith(env, "read", "valve-1", ...flags);
    expect(run.code).toBe(64);
    const url = flags[1] ?? env.FENCEGATE_BROKER;
    expect(run.stderr.split("\n")[0]).toBe(
      `fencegate read: ${source} "${url}" is not a broker URL: mqtt://HOST:1883, mqtts://HOST:8883, ws://HOST/PATH or wss://HOST/PATH`,
    );
  });

  it("numbers sends without --seq from a counter per holder and token, moved above the fence when the counter was lost", async () => {
    const { token } = json(await cli("lease", "acquire", "valve-1", "--ttl-ms", "30000", "--holder", "ops-seq", "--json"));
    const seqs = [];
    for (const position of ["11", "12"]) {
      const sent = await cli("send", "valve-1", `position=${position}`, "--token", String(token), "--holder", "ops-seq", "--json");
      expect(sent.code, sent.stderr).toBe(0);
      seqs.push(json(sent).seq);
    }
    expect(seqs).toEqual([1, 2]);
    // Another account (or a wiped home): its counter starts at 1, which the fence already passed.
    const elsewhere = await cliWith(
      { FENCEGATE_BROKER: broker.url, FENCEGATE_STATE_DIR: join(dir, "state-elsewhere") },
      "send",
      "valve-1",
      "position=13",
      "--token",
      String(token),
      "--holder",
      "ops-seq",
      "--json",
    );
    expect(json(elsewhere)).toMatchObject({ ok: true, seq: 3, applied: { position: 13 } });
    expect(sim.device(1).targetPosition).toBe(13);
    await cli("lease", "release", "valve-1", "--token", String(token), "--holder", "ops-seq");
  });

  it("says in send --help how the default seq is chosen", async () => {
    const help = await cli("send", "--help");
    expect(help.stdout).toContain("Without --seq: one more than the last seq sent from this account");
  });

  it.each([
    [
      "a negative --seq",
      ["send", "valve-1", "position=1", "--token", "1", "--seq", "-1"],
      'fencegate send: --seq needs a value; "-1" starts with "-", so write --seq=-1 if that is the value',
    ],
    [
      "a negative --seq written with =",
      ["send", "valve-1", "position=1", "--token", "1", "--seq=-1"],
      "fencegate send: --seq must be an integer ≥ 0",
    ],
    ["an unknown option", ["read", "valve-1", "--colour", "red"], 'fencegate read: unknown option "--colour"'],
    ["a flag given a value", ["status", "--json=yes"], "fencegate status: --json takes no value"],
    ["a missing value", ["read", "valve-1", "-b"], "fencegate read: --broker needs a value"],
  ])("says %s in its own words, in three lines", async (_name, args, first) => {
    const run = await cli(...args);
    expect(run.code).toBe(64);
    const lines = run.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(3);
    expect(lines[0]).toBe(first);
  });

  it.each([
    ["daemon", "usage: fencegate daemon"],
    ["doctor", "usage: fencegate doctor"],
    ["start", "usage: fencegate start"],
    ["log", "usage: fencegate log"],
  ])("%s refuses an unknown option in two lines, in its own words", async (command, usage) => {
    const run = await cli(command, "--colour", "red");
    expect(run.code).toBe(64);
    const lines = run.stderr.trimEnd().split("\n");
    expect(lines[0]).toBe(`fencegate ${command}: unknown option "--colour"`);
    expect(lines[1]).toContain(usage);
    expect(lines).toHaveLength(2);
  });

  it("takes the lease for the configuration's leases.defaultTtlMs when --ttl-ms is not given", async () => {
    const config = join(dir, "gateway.yaml"); // the daemon's own: leases.defaultTtlMs 5000
    const fromConfig = await cliWith({}, "lease", "acquire", "valve-2", "--config", config, "--holder", "ops-ttl", "--json");
    expect(json(fromConfig)).toMatchObject({ ok: true, holder: "ops-ttl", ttlMs: 5000 });
    await cli("lease", "release", "valve-2", "--token", String(json(fromConfig).token), "--holder", "ops-ttl");
    const bare = await cli("lease", "acquire", "valve-2", "--holder", "ops-ttl", "--json");
    expect(json(bare)).toMatchObject({ ok: true, ttlMs: 10_000 }); // the gateway's default default
    await cli("lease", "release", "valve-2", "--token", String(json(bare).token), "--holder", "ops-ttl");
  });

  it("names --ttl-ms, the flag the operator typed, when the TTL is out of range", async () => {
    const run = await cli("lease", "acquire", "valve-2", "--ttl-ms", "10", "--holder", "ops-ttl");
    expect(run.code).toBe(5);
    expect(run.stderr).toMatch(/^INVALID_REQUEST: --ttl-ms must be an integer from 100 to 60000/);
    expect(run.stderr).not.toContain("ttlMs");
  });

  it("refuses a point given twice: usage error 64, nothing sent", async () => {
    const wire = await TopicWatcher.connect(broker.url, ["fencegate/valve-1/command"]);
    try {
      const run = await cli("send", "valve-1", "position=5", "position=6", "--token", "1", "--seq", "1", "--holder", "ops-1");
      expect(run).toMatchObject({
        code: 64,
        stderr: `fencegate send: position is given twice (position=5 and position=6): give each point once\n${SEND_USAGE}\nRun \`fencegate send --help\` for the options and examples.\n`,
      });
      expect(wire.messages).toEqual([]);
    } finally {
      await wire.close();
    }
  });

  it("shows the original outcome a DUPLICATE repeats", async () => {
    const { token } = json(await cli("lease", "acquire", "valve-3", "--ttl-ms", "30000", "--holder", "ops-dup", "--json"));
    const send = () => cli("send", "valve-3", "position=21.5", "--token", String(token), "--seq", "7", "--holder", "ops-dup");
    expect((await send()).code).toBe(0);
    const again = await send();
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/^DUPLICATE: /);
    expect(again.stderr).toContain(`\n  original: applied position=21.5 (token ${token}, seq 7)\n`);
    await cli("lease", "release", "valve-3", "--token", String(token), "--holder", "ops-dup");
  });
});
