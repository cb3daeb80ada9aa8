/**
 * The CLI (daemon and sim) bundled once from the current sources, for tests and runs that
 * start the daemon many times: through tsx each start costs twice the CPU (seconds on a
 * loaded two-core machine). Inside node_modules so its bare imports resolve.
 */
import { cpSync, rmSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { build } from "esbuild";
import { DIST_MAIN, ENTRY_POINTS } from "../../bin/dist.mjs";

const ROOT = resolve(import.meta.dirname, "../..");

export interface CliBundle {
  /** The bundle's main file: `node <bin> daemon ...`, `node <bin> sim ...`. */
  readonly bin: string;
  remove(): void;
}

export async function bundleCli(): Promise<CliBundle> {
  const outdir = join(ROOT, "node_modules/.cache/fencegate-bundle", `${process.pid}-${Date.now()}`);
  // The build's entry points (bin/dist.mjs), as in dist/ ("type": "module" above).
  await build({
    entryPoints: ENTRY_POINTS,
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
    target: "node20",
    outdir,
    logLevel: "warning",
  });
  // The status page's files beside the bundle, as bin/build.mjs puts them beside dist/.
  cpSync(join(ROOT, "src/adapters/http/status-page"), join(outdir, "status-page"), { recursive: true });
  return { bin: join(outdir, basename(DIST_MAIN)), remove: () => rmSync(outdir, { recursive: true, force: true }) };
}
