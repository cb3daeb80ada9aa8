/**
 * Conformance with a master nobody here wrote: mbpoll (libmodbus) reads the identity and
 * fence registers and writes a command block, over RTU on a pty (simulator in-process) and
 * over TCP (the `fencegate sim` CLI as a separate process, driven through its control socket).
 */
import { execFile, spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FENCED, PROFILE_MAGIC, encodeCommandBlock } from "../../packages/protocol/src/modbus-profile.ts";
import { createPtyPair, killChild } from "../src/pty.ts";
import type { PtyPair } from "../src/pty.ts";
import { sendControl, startSimulator } from "../src/simulator.ts";
import type { SimulatorHandle } from "../src/simulator.ts";
import { tempDir } from "./helpers.ts";

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function mbpoll(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile("mbpoll", args, { timeout: 5000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** `[ref]: value` lines of mbpoll's output → { ref: value }. */
function registers(out: string): Record<number, number> {
  const regs: Record<number, number> = {};
  for (const m of out.matchAll(/^\[(\d+)\]:\s+(-?\d+)/gm)) regs[Number(m[1])] = Number(m[2]);
  return regs;
}

const block = (token: number, seq: number, position: number) => encodeCommandBlock({ token, seq, setpoints: { position } }).map(String);

/** Registers start..start+count-1 expected from `values`. */
const expectRegs = (start: number, values: number[]) => Object.fromEntries(values.map((v, i) => [start + i, v]));

describe("mbpoll over RTU on a pty", () => {
  let pty: PtyPair;
  let sim: SimulatorHandle;
  const dir = tempDir();
  const rtu = (...args: string[]) => ["-m", "rtu", "-b", "115200", "-P", "even", "-s", "1", "-a", "1", "-0", "-1", "-o", "0.5", ...args];

  beforeAll(async () => {
    pty = await createPtyPair();
    sim = await startSimulator({ serial: { path: pty.device }, stateFile: path.join(dir, "eeprom.json"), rate: 0 });
  });
  afterAll(async () => {
    await sim?.close();
    await pty?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("reads the identity registers", async () => {
    const r = await mbpoll(rtu("-t", "4", "-r", "0", "-c", "8", pty.master));
    expect(r.code).toBe(0);
    expect(registers(r.stdout)).toEqual(expectRegs(0, [PROFILE_MAGIC, 1, 0x0101, 1, 0x0100, 0x4647, 1, 1]));
  });

  it("writes a command block and reads the fence and readings back", async () => {
    const w = await mbpoll([...rtu("-t", "4", "-r", String(FENCED.COMMAND_START), pty.master), ...block(77, 3, 42)]);
    expect(w.code).toBe(0);
    expect(w.stdout).toMatch(/Written 7 references/);
    const r = await mbpoll(rtu("-t", "3", "-r", String(FENCED.READBACK_START), "-c", String(FENCED.READBACK_COUNT), pty.master));
    expect(r.code).toBe(0);
    const regs = registers(r.stdout);
    expect([regs[16], regs[17], regs[18], regs[19], regs[20], regs[21]]).toEqual([0, 0, 0, 77, 0, 3]);
    expect([regs[32], regs[33]]).toEqual([4200, 4200]);
    expect(sim.device(1).applied.map((a) => [a.token, a.seq])).toEqual([[77, 3]]);
  });

  it("sees a stale block refused (an exception, not a timeout) and the fence unchanged", async () => {
    const w = await mbpoll([...rtu("-t", "4", "-r", String(FENCED.COMMAND_START), pty.master), ...block(76, 9, 1)]);
    expect(w.code).not.toBe(0);
    // libmodbus knows only the standard codes; 0x46 comes out as "Invalid exception code"
    expect(w.stderr).toMatch(/Invalid exception code/);
    expect(sim.device(1).fence).toMatchObject({ token: 77, seq: 3 });
  });
});

describe("mbpoll over TCP against the `fencegate sim` process", () => {
  let child: ChildProcess;
  let exited: Promise<void>;
  let exitCode: number | null = null;
  let ready: { tcp: { port: number }; control: string };
  let dir: string;
  const tcp = (...args: string[]) => ["-m", "tcp", "-p", String(ready.tcp.port), "-a", "1", "-0", "-1", "-o", "0.5", ...args];

  beforeAll(async () => {
    dir = tempDir();
    const bin = path.resolve(import.meta.dirname, "../../bin/fencegate.mjs");
    child = spawn(
      process.execPath,
      [
        bin,
        "sim",
        "--tcp",
        "127.0.0.1:0",
        "--unit",
        "1,2",
        "--rate",
        "0",
        "--state",
        path.join(dir, "eeprom.json"),
        "--control",
        path.join(dir, "ctl.sock"),
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    exited = new Promise((resolve) => child.once("exit", (code) => ((exitCode = code), resolve())));
    const lines = createInterface({ input: child.stdout! });
    ready = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("sim not ready in 10 s")), 10_000);
      lines.once("line", (line) => {
        clearTimeout(timer);
        resolve(JSON.parse(line) as typeof ready);
      });
      child.once("exit", () => reject(new Error("sim exited before ready")));
    });
  });
  afterAll(async () => {
    if (child) await killChild(child, exited);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("prints a ready line naming the bound port and control socket", () => {
    expect(ready).toMatchObject({ ready: true, units: [1, 2], profile: "fenced" });
    expect(ready.tcp.port).toBeGreaterThan(0);
  });

  it("reads the identity and fence registers and writes a command block", async () => {
    const id = await mbpoll(tcp("-t", "4", "-r", "0", "-c", "2", "127.0.0.1"));
    expect(registers(id.stdout)).toEqual({ 0: PROFILE_MAGIC, 1: 1 });
    const w = await mbpoll([...tcp("-t", "4", "-r", String(FENCED.COMMAND_START), "127.0.0.1"), ...block(5, 1, 50)]);
    expect(w.stdout).toMatch(/Written 7 references/);
    // the fence seq as one 32-bit big-endian-word integer, as a firmware author would read it
    const seq = await mbpoll(tcp("-t", "4:int", "-B", "-r", String(FENCED.FENCE_SEQ), "-c", "1", "127.0.0.1"));
    expect(registers(seq.stdout)).toEqual({ [FENCED.FENCE_SEQ]: 1 });
    const answer = await sendControl(ready.control, { op: "device", unit: 1 });
    expect(answer).toMatchObject({ ok: true, device: { fence: { token: 5, seq: 1 }, targetPosition: 50, appliedCount: 1 } });
  });

  it("obeys the control channel: mute, clear, power cycle", async () => {
    expect(await sendControl(ready.control, { op: "mute", on: true, unit: 1 })).toEqual({ ok: true });
    const muted = await mbpoll(tcp("-r", "0", "127.0.0.1"));
    expect(muted.code).not.toBe(0);
    expect(muted.stderr).toMatch(/timed out/i);
    await sendControl(ready.control, { op: "clear" });
    await sendControl(ready.control, { op: "powerCycle" });
    const fence = await mbpoll(tcp("-t", "4", "-r", String(FENCED.FENCE_START), "-c", "6", "127.0.0.1"));
    expect(registers(fence.stdout)).toEqual(expectRegs(FENCED.FENCE_START, [0, 0, 0, 5, 0, 1]));
    expect(await sendControl(ready.control, { op: "nope" } as never)).toMatchObject({ ok: false });
  });

  it("gives up a control request the simulator does not answer, naming the wait", async () => {
    child.kill("SIGSTOP"); // the socket still accepts (the kernel's backlog); nothing answers
    try {
      await expect(sendControl(ready.control, { op: "device", unit: 1 }, 300)).rejects.toThrow(
        "no answer on the control socket within 300 ms",
      );
    } finally {
      child.kill("SIGCONT");
    }
    expect(await sendControl(ready.control, { op: "device", unit: 1 })).toMatchObject({ ok: true });
  });

  it("answers exception 0x0B for a unit it does not have, and exits 0 on SIGTERM", async () => {
    const r = await mbpoll(["-m", "tcp", "-p", String(ready.tcp.port), "-a", "9", "-0", "-1", "-o", "0.5", "-r", "0", "127.0.0.1"]);
    expect(r.stderr).toMatch(/Target device failed to respond/i);
    child.kill("SIGTERM");
    await exited;
    expect(exitCode).toBe(0);
  });
});
