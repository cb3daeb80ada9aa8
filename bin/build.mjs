#!/usr/bin/env node
// npm run build: the daemon and CLI as one esbuild bundle in dist/ (bin/dist.mjs lists the
// entry points), dependencies included except the native modules. Measured on a daemon with
// one actuator, idle: 104 MB resident from tsc's output (one module per file, the former
// build), 89 MB from this bundle.
//
// Whitespace and syntax are minified (about 2 MB less resident than a readable bundle);
// identifiers are not (another 1 to 2 MB) and names are kept (keepNames; esbuild renames
// clashing top-level names otherwise), so stack traces and logged errors name the real
// functions and classes. dist/*.js.map maps back to the sources; Node reads the maps only
// under --enable-source-maps, so they cost nothing otherwise.
//
// The stamp dist/.built gets the time the build started (it is created as dist/.building
// first, then renamed): a source file edited during the build is newer, so the build is stale.
import { cpSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { DIST, ENTRY_POINTS, ROOT, STAMP } from "./dist.mjs";

/** What the dependencies get for `debug` (the real package only when DEBUG is set at start). */
const DEBUG_SHIM = join(ROOT, "bin/debug-unless-asked.cjs");

/** Native addons: loaded from node_modules at run time (prebuilt per architecture). */
const NATIVE = ["better-sqlite3", "@serialport/bindings-cpp"];

export const BUILD_OPTIONS = {
  entryPoints: ENTRY_POINTS,
  outdir: DIST,
  // Flat: every chunk directly in dist/.
  entryNames: "[name]",
  chunkNames: "chunk-[hash]",
  bundle: true,
  splitting: true, // the CLI's subcommands, imported on demand, stay separate chunks
  platform: "node",
  format: "esm",
  target: "node20",
  external: NATIVE,
  plugins: [
    {
      name: "debug-unless-asked",
      setup(b) {
        // The shim's own require of the real package resolves as usual.
        b.onResolve({ filter: /^debug$/ }, (args) => (args.importer === DEBUG_SHIM ? undefined : { path: DEBUG_SHIM }));
      },
    },
  ],
  minifyWhitespace: true,
  minifySyntax: true,
  keepNames: true,
  sourcemap: "linked",
  legalComments: "linked",
  // The bundled CommonJS dependencies call require(); ESM has none of its own.
  banner: {
    js: 'import { createRequire as __fencegateCreateRequire } from "node:module"; const require = __fencegateCreateRequire(import.meta.url);',
  },
  logLevel: "warning",
};

/**
 * esbuild, or a sentence and exit 1 when node_modules lacks it: `npm pack` in a fresh clone
 * runs this build (prepack) before anything was installed, and a stack trace does not say
 * what to do.
 */
async function esbuild() {
  try {
    return await import("esbuild");
  } catch (err) {
    if (err?.code !== "ERR_MODULE_NOT_FOUND" || !String(err.message).includes("esbuild")) throw err;
    console.error(
      "fencegate: building dist/ (npm run build; npm pack builds first) needs the dev dependencies, and node_modules lacks esbuild: run `npm ci` first, then this command again.",
    );
    process.exit(1);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const building = join(DIST, ".building");
  rmSync(DIST, { recursive: true, force: true });
  mkdirSync(DIST);
  writeFileSync(building, "");
  await (await esbuild()).build(BUILD_OPTIONS); // throws on an error: no stamp, so dist/ is not fresh
  // The status page's files, beside the bundle that serves them (the package ships no src/);
  // not its tsconfig.json, which is for the type check.
  cpSync(join(ROOT, "src/adapters/http/status-page"), join(DIST, "status-page"), {
    recursive: true,
    filter: (path) => !path.endsWith("tsconfig.json"),
  });
  renameSync(building, STAMP);
}
