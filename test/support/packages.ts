/**
 * The npm packages as a user gets them: `npm pack`, then installed from the tarball with
 * npm, and commands run from the installed tree.
 */
import { cpSync, mkdirSync, readdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { runTool, type Run, type RunOptions } from "./processes.ts";

export const ROOT = resolve(import.meta.dirname, "../..");

/** A command of the install tests: npm quiet, from the checkout, with the minutes an install may take. */
export function run(command: string, args: readonly string[], options: RunOptions = {}): Promise<Run> {
  return runTool(command, args, {
    cwd: ROOT,
    timeoutMs: 240_000,
    ...options,
    env: { npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false", ...options.env },
  });
}

/** `npm pack` in `cwd` (extra args: `-w NAME`); returns the tarball's path in `dest`. */
export async function npmPack(cwd: string, dest: string, args: readonly string[] = []): Promise<string> {
  const packed = await run("npm", ["pack", "--json", "--pack-destination", dest, ...args], { cwd });
  if (packed.code !== 0) throw new Error(`npm pack failed: ${packed.stderr}`);
  const [tarball] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf("["))) as { filename: string }[];
  return join(dest, tarball!.filename);
}

/** `entries` of the checkout copied into `dir`, with this checkout's node_modules linked. */
function sourceCopy(dir: string, entries: readonly string[]): string {
  mkdirSync(dir, { recursive: true });
  for (const entry of entries) cpSync(join(ROOT, entry), join(dir, entry), { recursive: true });
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  return dir;
}

/**
 * What the gateway's package is built from, copied into `dir`: its prepack build then
 * writes dist/ there, never under the checkout, where other tests run bin/fencegate.mjs
 * meanwhile.
 */
export function gatewaySourceCopy(dir: string): string {
  return sourceCopy(dir, [
    "package.json",
    "tsconfig.json",
    "README.md",
    "LICENSE",
    "bin",
    "src",
    "config",
    "docs",
    "firmware-bridge/src",
    "packages/protocol/src",
    "packages/client/package.json",
    "packages/client/src",
  ]);
}

/**
 * What the controller package is built from, copied into `dir`; returns the package's
 * directory there, to pack: its prepack removes and rebuilds dist/, which must not happen
 * under the checkout while another test packs it there.
 */
export function clientSourceCopy(dir: string): string {
  sourceCopy(dir, [
    "tsconfig.json",
    "packages/protocol/src",
    "packages/client/src",
    "packages/client/package.json",
    "packages/client/tsconfig.json",
    "packages/client/README.md",
    "packages/client/LICENSE",
  ]);
  // The sources are ES modules by the checkout's package.json; not its workspaces.
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "fencegate-sources", private: true, type: "module" }));
  return join(dir, "packages/client");
}

/** Every file under `dir` (relative paths), symbolic links not followed. */
export function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() || (e.isSymbolicLink() && statSync(join(e.parentPath, e.name), { throwIfNoEntry: false })?.isFile()))
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1));
}
