/**
 * Whether SQLite (better-sqlite3, a native module; it keeps the journal) loads in this Node.
 * Its native part comes from its install script, which npm's install-script policy may skip
 * (`npm install -g` without `--allow-scripts`, see docs/deploy.md) or --ignore-scripts
 * skips; a daemon started without it must say so, not fail at the journal as if the journal
 * were unreadable and advise moving it aside.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { nativeModuleError } from "../adapters/journal/native.ts";
import { PACKAGE_ROOT } from "../package-root.ts";

/** The packages whose install scripts build or fetch the native modules. */
export const NATIVE_PACKAGES = ["better-sqlite3", "@serialport/bindings-cpp"] as const;

/** null when SQLite loads; otherwise a sentence for the operator saying what to do. */
export function sqliteProblem(): string | null {
  try {
    const Database = createRequire(join(PACKAGE_ROOT, "package.json"))("better-sqlite3") as new (path: string) => { close(): void };
    new Database(":memory:").close();
    return null;
  } catch (err) {
    const message = (err as Error).message;
    const rebuild = `run \`npm rebuild better-sqlite3\` in ${PACKAGE_ROOT}`;
    const native = nativeModuleError(err);
    if (native !== null) return `fencegate: SQLite, which keeps the journal, cannot load: ${native.message}`;
    if (/bindings file|Cannot find module/.test(message)) {
      const { version } = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { version: string };
      return (
        `fencegate: SQLite, which keeps the journal, is not installed: better-sqlite3 has no native module for Node ${process.versions.node} on ${process.platform}-${process.arch} ` +
        `because its install script did not run (npm's install-script policy, or --ignore-scripts). Install again allowing it, ` +
        `\`npm install -g --allow-scripts=${NATIVE_PACKAGES.join(",")} ./fencegate-${version}.tgz\` (docs/deploy.md), or ${rebuild}.`
      );
    }
    return `fencegate: SQLite, which keeps the journal, cannot load (${message.split("\n")[0]}): ${rebuild}.`;
  }
}
