/**
 * Every process a system test starts goes through here: the fencegate CLI and other tools
 * run to their end (asynchronously where this process must keep serving a simulator or a
 * broker meanwhile), and long-running children, which a {@link Teardown} stops.
 */
import { execFile, spawn, spawnSync, type ChildProcess, type ExecFileException, type StdioOptions } from "node:child_process";
import { resolve } from "node:path";
import type { Teardown } from "./stack.ts";

export type { ChildProcess } from "node:child_process";

export const FENCEGATE_BIN = resolve(import.meta.dirname, "../../bin/fencegate.mjs");

export interface Run {
  /** The exit code; null when a signal ended it or it never started. */
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  /** Why it did not run to its own end: not found, timed out, too much output. */
  readonly error?: Error;
  readonly ms: number;
}

export interface RunOptions {
  readonly cwd?: string;
  /** Added to this process's environment; with `envOnly`, the whole of it. */
  readonly env?: Record<string, string | undefined>;
  readonly envOnly?: boolean;
  /** SIGTERM after this long. */
  readonly timeoutMs?: number;
  /** As another user (a test as root acting as nobody). */
  readonly uid?: number;
  readonly gid?: number;
}

export interface FencegateOptions extends RunOptions {
  /** The CLI to run: a bundle or an installed dist/ instead of bin/fencegate.mjs. */
  readonly bin?: string;
}

const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

function spawnOptions(options: RunOptions) {
  return {
    cwd: options.cwd,
    env: options.envOnly ? options.env : { ...process.env, ...options.env },
    timeout: options.timeoutMs,
    ...(options.uid === undefined ? {} : { uid: options.uid }),
    ...(options.gid === undefined ? {} : { gid: options.gid }),
  };
}

/** A word for `sh -c`: single-quoted, a quote inside it closed, escaped and reopened. */
export const shellWord = (word: string) => `'${word.replaceAll("'", `'\\''`)}'`;

/** `node bin/fencegate.mjs ARGS` as one line for `sh -c` (a test that runs it inside a mount namespace, a tmpfs, a terminal). */
export function fencegateShellCommand(args: readonly string[]): string {
  return [process.execPath, FENCEGATE_BIN, ...args].map(shellWord).join(" ");
}

const fencegateArgs = (args: readonly string[], options: Pick<FencegateOptions, "bin">) => [options.bin ?? FENCEGATE_BIN, ...args];

/** Runs `command` to its end without blocking this process's event loop. */
export function runTool(command: string, args: readonly string[], options: RunOptions = {}): Promise<Run> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(
      command,
      [...args],
      { ...spawnOptions(options), encoding: "utf8", maxBuffer: MAX_OUTPUT_BYTES },
      (err: ExecFileException | null, stdout, stderr) => {
        // execFile's error is also how it reports an exit code other than 0.
        const exitCode = err === null ? 0 : typeof err.code === "number" ? err.code : null;
        resolve({
          code: exitCode,
          signal: (err?.signal as NodeJS.Signals | undefined) ?? null,
          stdout,
          stderr,
          ...(err !== null && exitCode === null ? { error: err } : {}),
          ms: performance.now() - started,
        });
      },
    );
  });
}

/** Runs `command` to its end, this process waiting (nothing in it must answer meanwhile). */
export function runToolSync(command: string, args: readonly string[], options: RunOptions = {}): Run {
  const started = performance.now();
  const run = spawnSync(command, args, { ...spawnOptions(options), encoding: "utf8", maxBuffer: MAX_OUTPUT_BYTES });
  return {
    code: run.status,
    signal: run.signal,
    stdout: run.stdout ?? "",
    stderr: run.stderr ?? "",
    ...(run.error ? { error: run.error } : {}),
    ms: performance.now() - started,
  };
}

/** A setup step that must work: its stdout; throws with its stderr if it does not exit 0. */
export function runToolOrThrow(command: string, args: readonly string[], options: RunOptions = {}): string {
  const run = runToolSync(command, args, options);
  if (run.code !== 0)
    throw new Error(`${command} ${args.join(" ")} failed (${run.error?.message ?? run.code ?? run.signal}): ${run.stderr}`);
  return run.stdout;
}

/** `node bin/fencegate.mjs ARGS` to its end, without blocking this process. */
export function runFencegate(args: readonly string[], options: FencegateOptions = {}): Promise<Run> {
  return runTool(process.execPath, fencegateArgs(args, options), options);
}

/** `node bin/fencegate.mjs ARGS` to its end, this process waiting. */
export function runFencegateSync(args: readonly string[], options: FencegateOptions = {}): Run {
  return runToolSync(process.execPath, fencegateArgs(args, options), options);
}

export interface StartOptions {
  readonly cwd?: string;
  /** Added to this process's environment. */
  readonly env?: Record<string, string | undefined>;
  /** Default: stdin ignored, stdout and stderr piped. */
  readonly stdio?: StdioOptions;
}

/**
 * Starts a long-running `command`; `teardown` stops it if it still runs then. Null only for
 * a child whose owner stops it itself: a helper's close(), the chaos run that kills and
 * restarts its own.
 */
export function startProcess(
  teardown: Teardown | null,
  command: string,
  args: readonly string[],
  options: StartOptions = {},
): ChildProcess {
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: { ...process.env, ...options.env },
    stdio: options.stdio ?? ["ignore", "pipe", "pipe"],
  });
  teardown?.add(child, (c) => stopProcess(c));
  return child;
}

/** `node bin/fencegate.mjs ARGS` long-running (watch, sim), stopped at teardown. */
export function startFencegate(
  teardown: Teardown | null,
  args: readonly string[],
  options: StartOptions & Pick<FencegateOptions, "bin"> = {},
): ChildProcess {
  return startProcess(teardown, process.execPath, fencegateArgs(args, options), options);
}

/** Whether `child` still runs (it may have exited, or never started). */
const isRunning = (child: ChildProcess): boolean => child.exitCode === null && child.signalCode === null && child.pid !== undefined;

/** SIGTERM (after SIGCONT, should it be stopped), SIGKILL if it has not exited within `graceMs`; resolves once it exited. */
export async function stopProcess(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (!isRunning(child)) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGCONT");
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Whether nobody (uid 65534) may run this node and read `file`: a test as root that acts as
 * the service user needs it, and it is not so where the checkout is under /root.
 */
export function nobodyCanRead(file: string): boolean {
  return (
    runToolSync(process.execPath, ["-e", `require("fs").accessSync(${JSON.stringify(file)}, 4)`], { uid: 65534, gid: 65534 }).code === 0
  );
}
