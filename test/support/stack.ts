/**
 * One test file's private world: a Mosquitto broker, the simulated actuator(s) over Modbus
 * TCP, the real daemon process and a temp dir. Each piece is registered with a
 * {@link Teardown} the moment it exists, so the file's afterAll cleans up whatever was
 * started, also when setup failed half-way.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from "../../firmware-bridge/src/simulator.ts";
import { TestController } from "./controller.ts";
import { DaemonProcess, gatewayConfig, valve, type GatewaySetup } from "./daemon.ts";
import { startMosquitto, type Broker, type BrokerConfig } from "./mosquitto.ts";

/** Clean-up steps, run in reverse order of registration; every step runs even if one fails. */
export class Teardown {
  private readonly steps: (() => unknown)[] = [];

  /** Registers `close(value)` for teardown and returns `value`. */
  add<T>(value: T, close: (value: T) => unknown): T {
    this.steps.push(() => close(value));
    return value;
  }

  async run(): Promise<void> {
    const errors: unknown[] = [];
    for (const step of this.steps.splice(0).reverse()) {
      try {
        await step();
      } catch (err) {
        errors.push(err);
      }
    }
    if (errors.length > 0) throw new AggregateError(errors, `${errors.length} teardown step(s) failed`);
  }
}

/** SIGTERM (the daemon drains and exits), SIGKILL if it has not exited within `graceMs`. */
export async function stopDaemon(daemon: DaemonProcess, graceMs = 5000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), graceMs)));
  const result = await Promise.race([daemon.kill("SIGTERM"), late]);
  clearTimeout(timer);
  if (result === "late") await daemon.kill("SIGKILL");
}

/** Whether the daemon still runs, and what it said last: for the report of a failing test. */
export function daemonReport(daemon: DaemonProcess | undefined, lines = 25): string {
  if (!daemon) return "daemon: not started";
  const { exitCode, signalCode, pid } = daemon.child;
  const status = exitCode === null && signalCode === null ? `running (pid ${pid})` : `exited (${exitCode ?? signalCode})`;
  const tail = daemon.logs.slice(-lines).map((l) => JSON.stringify(l));
  return [`daemon: ${status}`, `stderr: ${daemon.stderr.slice(-2000)}`, "last log lines:", ...tail].join("\n");
}

export interface StackOptions {
  /** Prefix of the temp dir. */
  readonly name: string;
  /** Simulator options besides the transport (always Modbus TCP on a free loopback port). */
  readonly sim?: (dir: string) => Omit<SimulatorOptions, "tcp" | "serial">;
  /** The gateway's setup besides the broker and the journal; the simulator's address is given. */
  readonly gateway: (sim: { host: string; port: number }) => Omit<GatewaySetup, "brokerUrl" | "journalPath">;
  /** Fenced actuators whose device fence the daemon must have read before the stack is ready. */
  readonly fenced: readonly string[];
  /** Extra node flags for the daemon (e.g. `--import` of a slow-disk emulation). */
  readonly nodeArgs?: readonly string[];
  /** More Mosquitto configuration (another listener, a password file) after its plain anonymous listener, which the daemon uses. */
  readonly brokerConfig?: BrokerConfig;
}

export interface Stack {
  readonly dir: string;
  readonly broker: Broker;
  readonly sim: SimulatorHandle;
  readonly daemon: DaemonProcess;
  /** The daemon's configuration: `DaemonProcess.start(dir, config)` starts it again over the same journal. */
  readonly config: Record<string, unknown>;
}

/** Starts broker, simulator and daemon, and waits until the daemon is ready to serve. */
export async function startStack(teardown: Teardown, options: StackOptions): Promise<Stack> {
  const dir = teardown.add(mkdtempSync(join(tmpdir(), `fencegate-${options.name}-`)), (d) => rmSync(d, { recursive: true, force: true }));
  const broker = teardown.add(await startMosquitto(options.brokerConfig), (b) => b.stop());
  const sim = teardown.add(await startSimulator({ ...options.sim?.(dir), tcp: { host: "127.0.0.1", port: 0 } }), (s) => s.close());
  const config = gatewayConfig({ ...options.gateway(sim.tcp!), brokerUrl: broker.url, journalPath: join(dir, "journal.db") });
  const daemon = teardown.add(DaemonProcess.start(dir, config, { nodeArgs: options.nodeArgs ?? [] }), (d) => stopDaemon(d));
  await daemon.ready(options.fenced);
  return { dir, broker, sim, daemon, config };
}

export interface ValveStack extends Stack {
  /** A controller with holder "line-a". */
  readonly ctl: TestController;
  /** The daemon running now: a test that starts another sets it, and teardown stops it. */
  daemon: DaemonProcess;
}

/**
 * The usual single-valve world: one actuator `id` on the simulator (unit 1, instant
 * motion) over Modbus TCP, a controller, and the current daemon stopped at teardown.
 */
export async function startValveStack(
  teardown: Teardown,
  options: {
    readonly name: string;
    readonly id: string;
    readonly profile?: "fenced" | "plain";
    readonly actuator?: Record<string, unknown>;
    readonly setup?: Partial<Omit<GatewaySetup, "brokerUrl" | "journalPath">>;
    readonly bus?: Record<string, unknown>;
    readonly nodeArgs?: readonly string[];
  },
): Promise<ValveStack> {
  const profile = options.profile ?? "fenced";
  const stack = await startStack(teardown, {
    name: options.name,
    sim: () => ({ units: [1], rate: 0, profile }),
    gateway: (at) => ({
      buses: { sim: { type: "tcp", ...at, ...options.bus } },
      actuators: [valve(options.id, "sim", 1, profile, options.actuator)],
      ...options.setup,
    }),
    fenced: profile === "fenced" ? [options.id] : [],
    ...(options.nodeArgs ? { nodeArgs: options.nodeArgs } : {}),
  });
  const ctl = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  const world: ValveStack = { ...stack, ctl };
  teardown.add(world, (w) => stopDaemon(w.daemon));
  return world;
}
