/**
 * A private Mosquitto broker for one test file, on a free loopback port, with Nagle off
 * (set_tcp_nodelay: see the field notes' 88 ms). It can be stopped and started again on
 * the same port, to test broker restarts.
 *
 * Its ports are below the ephemeral range, so that a restart finds its port still free.
 * Ready means Mosquitto said it is running (after binding every listener), not that
 * something accepts on the port: a port found free a moment ago may have been taken since,
 * and then a connect test would find the intruder while Mosquitto exits with "Address
 * already in use". On that, and only that, the first start draws a fresh port and tries again.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { portBelowEphemeral } from "./ports.ts";
import { startProcess, type ChildProcess } from "./processes.ts";

export interface Broker {
  readonly port: number;
  readonly url: string;
  /** The port given to a function `extraConfig` (a second listener), if any. */
  readonly extraPort: number | undefined;
  start(): Promise<void>;
  /** SIGKILL: the broker vanishes as in a crash. */
  kill(): Promise<void>;
  stop(): Promise<void>;
  /** Sends `signal` to the running broker: SIGSTOP freezes it (its connections stay up, nothing is answered). */
  signal(signal: NodeJS.Signals): void;
}

/** More configuration after the plain listener; a function is given a second free port for a listener of its own. */
export type BrokerConfig = string | ((extraPort: number) => string);

const START_TIMEOUT_MS = 10_000;
/** Fresh ports to try when a drawn one was taken before Mosquitto bound it; one is nearly always enough. */
const PORT_ATTEMPTS = 5;

class PortTaken extends Error {}

export async function startMosquitto(extraConfig: BrokerConfig = ""): Promise<Broker> {
  for (let attempt = 1; ; attempt++) {
    const broker = await brokerOnFreePorts(extraConfig);
    try {
      await broker.start();
      return broker;
    } catch (err) {
      await broker.stop();
      if (!(err instanceof PortTaken) || attempt === PORT_ATTEMPTS) throw err;
    }
  }
}

async function brokerOnFreePorts(extraConfig: BrokerConfig): Promise<Broker> {
  const port = await portBelowEphemeral();
  const extraPort = typeof extraConfig === "function" ? await portBelowEphemeral() : undefined;
  const extra = typeof extraConfig === "function" ? extraConfig(extraPort!) : extraConfig;
  const dir = mkdtempSync(join(tmpdir(), "fencegate-mosquitto-"));
  const conf = join(dir, "mosquitto.conf");
  writeFileSync(
    conf,
    [`listener ${port} 127.0.0.1`, "allow_anonymous true", "set_tcp_nodelay true", "persistence false", extra].join("\n") + "\n",
  );
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  return {
    port,
    url: `mqtt://127.0.0.1:${port}`,
    extraPort,
    async start() {
      // The broker is stopped and started again by its tests, and stopped by the Broker's own stop().
      const c = startProcess(null, "mosquitto", ["-c", conf]);
      child = c;
      let output = "";
      exited = new Promise((resolve) => c.once("exit", () => resolve()));
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`mosquitto did not say it is running within ${START_TIMEOUT_MS} ms:\n${output}`)),
          START_TIMEOUT_MS,
        );
        const seen = (d: Buffer) => {
          output += d.toString();
          // Mosquitto logs "... running" once every listener is bound.
          if (/mosquitto version \S+ running/.test(output)) {
            clearTimeout(timer);
            resolve();
          }
        };
        c.stdout?.on("data", seen);
        c.stderr?.on("data", seen);
        void exited.then(() => {
          clearTimeout(timer);
          const taken = /Address already in use/.test(output);
          reject(
            taken
              ? new PortTaken(`a port of mosquitto's was taken before it bound it:\n${output}`)
              : new Error(`mosquitto exited before it was running:\n${output}`),
          );
        });
      });
    },
    async kill() {
      child?.kill("SIGKILL");
      await exited;
      child = null;
    },
    signal(signal) {
      child?.kill(signal);
    },
    async stop() {
      child?.kill("SIGTERM");
      await exited;
      child = null;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
