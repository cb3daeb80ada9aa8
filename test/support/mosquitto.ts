/**
 * A private Mosquitto broker for one test file, on a free loopback port, with Nagle off
 * (set_tcp_nodelay: see the field notes' 88 ms). It can be stopped and started again on
 * the same port, to test broker restarts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports.ts";

export interface Broker {
  readonly port: number;
  readonly url: string;
  start(): Promise<void>;
  /** SIGKILL: the broker vanishes as in a crash. */
  kill(): Promise<void>;
  stop(): Promise<void>;
  /** Sends `signal` to the running broker: SIGSTOP freezes it (its connections stay up, nothing is answered). */
  signal(signal: NodeJS.Signals): void;
}

export async function startMosquitto(extraConfig = ""): Promise<Broker> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "fencegate-mosquitto-"));
  const conf = join(dir, "mosquitto.conf");
  writeFileSync(conf, [`listener ${port} 127.0.0.1`, "allow_anonymous true", "set_tcp_nodelay true", "persistence false", extraConfig].join("\n") + "\n");
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  let output = "";

  const broker: Broker = {
    port,
    url: `mqtt://127.0.0.1:${port}`,
    async start() {
      const c = spawn("mosquitto", ["-c", conf], { stdio: ["ignore", "pipe", "pipe"] });
      child = c;
      c.stdout?.on("data", (d: Buffer) => (output += d.toString()));
      c.stderr?.on("data", (d: Buffer) => (output += d.toString()));
      exited = new Promise((resolve) => c.once("exit", () => resolve()));
      try {
        await waitForPort(port);
      } catch (err) {
        throw new Error(`mosquitto did not start: ${(err as Error).message}\n${output}`);
      }
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
  await broker.start();
  return broker;
}
