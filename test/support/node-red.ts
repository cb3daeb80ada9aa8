/**
 * Node-RED for the node package's tests: the runtime this Node can run (Node-RED 5 needs
 * Node >= 22.9, 4.1 runs from 18.5: Node 24 tests 5.x, Node 20 tests 4.1.x, as users on Pis
 * run both), and the package as a user installs it: packed, with the controller package's
 * tarball, `npm install`ed into a Node-RED user directory.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { clientSourceCopy, npmPack, ROOT, run } from "./packages.ts";

const requireHere = createRequire(import.meta.url);

function atLeast(version: string, major: number, minor: number): boolean {
  const [a = 0, b = 0] = version.split(".").map(Number);
  return a > major || (a === major && b >= minor);
}

/** The package to run: `node-red-5` is node-red@5 under an npm alias (test/node-red-5, installed on Node >= 22.9 only). */
export const NODE_RED_PACKAGE = atLeast(process.versions.node, 22, 9) ? "node-red-5" : "node-red";

export interface NodeRedRuntime {
  /** The package's main file, for node-red-node-test-helper's init. */
  readonly main: string;
  /** The `node-red` command's script, to start a real Node-RED. */
  readonly cli: string;
  readonly version: string;
  /** A core node module (e.g. "common/20-inject.js") of this Node-RED, as the helper loads node modules. */
  coreNodes(file: string): unknown;
}

export function nodeRedRuntime(): NodeRedRuntime {
  const manifestPath = requireHere.resolve(`${NODE_RED_PACKAGE}/package.json`, { paths: [ROOT] });
  const manifest = requireHere(manifestPath) as { version: string; main: string; bin: Record<string, string> };
  const fromRuntime = createRequire(manifestPath);
  const nodesDir = dirname(fromRuntime.resolve("@node-red/nodes/package.json"));
  return {
    main: join(dirname(manifestPath), manifest.main),
    cli: join(dirname(manifestPath), manifest.bin["node-red"]!),
    version: manifest.version,
    coreNodes: (file) => fromRuntime(join(nodesDir, "core", file)),
  };
}

export interface InstalledPackage {
  /** A Node-RED user directory (what ~/.node-red is on a Pi) with the package installed. */
  readonly userDir: string;
  /** The installed package's directory. */
  readonly packageDir: string;
  /** The node set's module, as node-red-node-test-helper takes it. */
  readonly nodes: unknown;
  readonly tarballs: { readonly client: string; readonly nodeRed: string };
}

/**
 * Packs fencegate-client (from a copy of its sources: its prepack rebuilds dist/) and
 * @fencegate/node-red, and installs both tarballs into a new user directory under `dir`,
 * as the package's README tells a user to on a Pi.
 */
export async function installNodeRedPackage(dir: string): Promise<InstalledPackage> {
  const tarballs = {
    client: await npmPack(clientSourceCopy(join(dir, "client-src")), dir),
    nodeRed: await npmPack(ROOT, dir, ["-w", "@fencegate/node-red"]),
  };
  const userDir = join(dir, "node-red-user");
  mkdirSync(userDir);
  writeFileSync(
    join(userDir, "package.json"),
    JSON.stringify({ name: "node-red-project", description: "A Node-RED user directory", version: "0.0.1", private: true }),
  );
  const installed = await run("npm", ["install", "--no-audit", "--no-fund", tarballs.client, tarballs.nodeRed], { cwd: userDir });
  if (installed.code !== 0) throw new Error(`npm install of the tarballs failed: ${installed.stderr}`);
  const packageDir = join(userDir, "node_modules/@fencegate/node-red");
  return { userDir, packageDir, nodes: requireHere(join(packageDir, "nodes/fencegate.js")), tarballs };
}
