/**
 * A connected pair of pseudo-terminals made by socat, standing in for a serial line
 * (a null-modem cable): bytes written to one end come out of the other. Used by tests and
 * benchmarks of the simulator and of the gateway's Modbus adapter.
 *
 *   const pty = await createPtyPair();   // pty.device ↔ pty.master
 *   ... startSimulator({ serial: { path: pty.device } }) ... open pty.master as the master ...
 *   await pty.close();
 */
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

export interface PtyPair {
  /** Link for the device (simulator) side. */
  readonly device: string;
  /** Link for the master (gateway) side. */
  readonly master: string;
  readonly pid: number;
  /** Kill socat (SIGTERM, then SIGKILL after 2 s) and remove the links' directory if we made it. */
  close(): Promise<void>;
}

export interface PtyOptions {
  /** Directory for the two links; default a fresh temp dir, removed by close(). */
  readonly dir?: string;
  /** How long to wait for both links, ms (default 5000). */
  readonly timeoutMs?: number;
}

export async function createPtyPair(options: PtyOptions = {}): Promise<PtyPair> {
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-pty-"));
  const device = path.join(dir, "device");
  const master = path.join(dir, "master");
  const child = spawn("socat", ["-d", "-d", `pty,raw,echo=0,link=${device}`, `pty,raw,echo=0,link=${master}`], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const close = async () => {
    await killChild(child, exited);
    if (ownDir) fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      () => stderr.includes("starting data transfer loop") && fs.existsSync(device) && fs.existsSync(master),
      options.timeoutMs ?? 5000,
      () => child.exitCode !== null || child.signalCode !== null,
    );
  } catch (err) {
    await close();
    throw new Error(`socat did not make the pty pair: ${(err as Error).message}\n${stderr}`);
  }
  return { device, master, pid: child.pid ?? -1, close };
}

async function waitFor(ready: () => boolean, timeoutMs: number, failed: () => boolean): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!ready()) {
    if (failed()) throw new Error("socat exited");
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** SIGTERM a child we started (by its pid only), SIGKILL it if it lingers; resolves when it exited. */
export async function killChild(child: ChildProcess, exited: Promise<void>, graceMs = 2000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}
