/**
 * The package's root directory (package.json, config/): the nearest directory above this
 * code that holds a package.json. From the sources this module sits in src/; from the build
 * it is inlined into one of dist/'s bundle chunks, one level deeper or shallower depending on
 * how the bundle is laid out, so a fixed "../.." would be right in one of them only.
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";

function findPackageRoot(from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json in ${from} or above it`);
  }
}

export const PACKAGE_ROOT = findPackageRoot(import.meta.dirname);
