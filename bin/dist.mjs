// Whether the build in dist/ (npm run build, an esbuild bundle) may run instead of the
// TypeScript sources: it exists and no source file is newer than it. A stale build falls back
// to the sources, so an edit is never silently ignored; the check costs ~1 ms (a stat per
// file).
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));
export const DIST = join(ROOT, "dist");
/**
 * The build's entry points (bin/build.mjs bundles each into dist/<name>.js; the modules they
 * import dynamically become chunks beside them), the one list of them.
 */
export const ENTRY_POINTS = {
  fencegate: join(ROOT, "src/cli/main.ts"),
  // The journal's writer thread (src/adapters/journal/worker-client.ts starts it from beside itself).
  "journal-worker": join(ROOT, "src/adapters/journal/worker.ts"),
};
export const DIST_MAIN = join(DIST, "fencegate.js");
export const STAMP = join(DIST, ".built");
const SOURCES = ["src", "packages/protocol/src", "packages/client/src", "firmware-bridge/src"];

function newestMtimeMs(dir) {
  let newest = 0;
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true, recursive: true });
  } catch {
    return 0; // not shipped (a production install of dist/ only)
  }
  for (const e of entries) {
    if (e.isFile() && e.name.endsWith(".ts")) newest = Math.max(newest, statSync(join(e.parentPath ?? e.path, e.name)).mtimeMs);
  }
  return newest;
}

/** True when dist/ holds a build at least as new as every source file. */
export function distIsFresh() {
  let built;
  try {
    built = statSync(STAMP).mtimeMs;
    statSync(DIST_MAIN);
  } catch {
    return false;
  }
  return SOURCES.every((d) => newestMtimeMs(join(ROOT, d)) <= built);
}

/**
 * Whether bin/fencegate.mjs runs dist/: when fresh, or when FENCEGATE_RUNTIME says so
 * ("dist": whenever a build exists, e.g. a benchmark while sources change around it;
 * "tsx": never).
 */
export function useDist() {
  const forced = process.env.FENCEGATE_RUNTIME;
  if (forced === "tsx") return false;
  if (forced === "dist") {
    try {
      statSync(DIST_MAIN);
      return true;
    } catch {
      return false;
    }
  }
  return distIsFresh();
}
