/**
 * The gateway package as an operator gets it: `npm pack` (its prepack builds dist/), then
 * `npm install -g --prefix DIR ./fencegate-x.y.z.tgz`, and the `fencegate` command run from
 * that prefix: --version, and the demo, which runs the real daemon, journal and simulator.
 *
 * better-sqlite3 installs as on a Pi: prebuild-install downloads a prebuilt binary. This
 * machine cannot reach its download host, so a local server stands in for it
 * (npm_config_better_sqlite3_binary_host), serving this checkout's binary, built for this
 * very Node, in the layout prebuild-install asks for.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NODE_FLAGS } from "../../../bin/node-flags.mjs";
import { NATIVE_PACKAGES } from "../../../src/cli/sqlite.ts";
import { filesUnder, gatewaySourceCopy, npmPack, ROOT, run } from "../../support/packages.ts";
import { runToolOrThrow, type Run } from "../../support/processes.ts";

let dir: string;
let prefix: string;
let prebuilt: Server;
const downloads: string[] = [];
let installed: Run;
/** The same with the native modules' install scripts not run, as an npm that blocks them would leave it. */
let blockedPrefix: string;
let blocked: Run;
/** docs/deploy.md's way: the tarball unpacked into a directory, npm install --omit=dev there. */
let deployDir: string;
let deployed: Run;

const SQLITE = JSON.parse(readFileSync(join(ROOT, "node_modules/better-sqlite3/package.json"), "utf8")) as { version: string };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "fencegate-gateway-package-"));
  const archive = join(dir, "prebuilt.tar.gz");
  runToolOrThrow("tar", ["-czf", archive, "-C", join(ROOT, "node_modules/better-sqlite3"), "build/Release/better_sqlite3.node"]);
  const expected = `/v${SQLITE.version}/better-sqlite3-v${SQLITE.version}-node-v${process.versions.modules}-linux-${process.arch}.tar.gz`;
  prebuilt = createServer((req, res) => {
    downloads.push(req.url ?? "");
    if (req.url !== expected) return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": "application/gzip" }).end(readFileSync(archive));
  }).listen(0, "127.0.0.1");
  await new Promise((r) => prebuilt.once("listening", r));

  const tarball = await npmPack(gatewaySourceCopy(join(dir, "source")), dir);
  const env = { npm_config_better_sqlite3_binary_host: `http://127.0.0.1:${(prebuilt.address() as AddressInfo).port}` };
  prefix = join(dir, "prefix");
  // As README and docs/deploy.md say to type: npm 11's install-script policy covers global
  // installs only by the flag (a package's own allowScripts counts in a project only).
  installed = await run("npm", ["install", "-g", "--prefix", prefix, `--allow-scripts=${NATIVE_PACKAGES.join(",")}`, tarball], {
    cwd: dir,
    env,
  });
  blockedPrefix = join(dir, "prefix-blocked");
  blocked = await run("npm", ["install", "-g", "--prefix", blockedPrefix, "--ignore-scripts", tarball], { cwd: dir, env });
  deployDir = join(dir, "opt-fencegate");
  mkdirSync(deployDir);
  runToolOrThrow("tar", ["-xzf", tarball, "-C", deployDir, "--strip-components=1"]);
  deployed = await run("npm", ["install", "--omit=dev"], { cwd: deployDir, env });
}, 300_000);

afterAll(async () => {
  prebuilt?.close();
  rmSync(dir, { recursive: true, force: true });
});

const fencegate = (...args: string[]) => run(join(prefix, "bin/fencegate"), args, { cwd: dir, timeoutMs: 60_000 });

describe("the gateway package", () => {
  it("installs with npm install -g from its tarball, better-sqlite3 from a prebuilt binary", () => {
    expect(installed.code, installed.stderr).toBe(0);
    expect(downloads.filter((url) => url.includes(`node-v${process.versions.modules}`))).toHaveLength(1);
  });

  it("installs globally without an install-script warning the way README and docs/deploy.md say to type it", () => {
    expect(installed.stderr).not.toMatch(/install-scripts|not yet covered by allowScripts/);
    const { version } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    const typed = `npm install -g --allow-scripts=${NATIVE_PACKAGES.join(",")} ./fencegate-${version}.tgz`;
    for (const doc of ["README.md", "docs/deploy.md"]) expect(readFileSync(join(ROOT, doc), "utf8"), doc).toContain(typed);
  });

  it("refuses to start without SQLite's native module, in one sentence that says how to install it (exit 78)", async () => {
    expect(blocked.code, blocked.stderr).toBe(0);
    const bin = join(blockedPrefix, "bin/fencegate");
    expect(await run(bin, ["--version"], { cwd: dir })).toMatchObject({ code: 0 });
    for (const args of [["demo"], ["daemon", "--config", join(blockedPrefix, "lib/node_modules/fencegate/config/embedded.yaml")]]) {
      const started = await run(bin, args, { cwd: dir, timeoutMs: 60_000 });
      expect(started.code, args[0]).toBe(78);
      expect(started.stdout, args[0]).toBe("");
      expect(started.stderr, args[0]).toMatch(
        /^fencegate: SQLite, which keeps the journal, is not installed: .* Install again allowing it, `npm install -g --allow-scripts=better-sqlite3,@serialport\/bindings-cpp \.\/fencegate-[0-9.]+\.tgz` \(docs\/deploy\.md\), or run `npm rebuild better-sqlite3` in .*\.\n$/,
      );
    }
  });

  it("ships the build and what it needs, no sources, tests, TypeScript or tsx", () => {
    const pkg = join(prefix, "lib/node_modules/fencegate");
    const files = filesUnder(pkg).filter((f) => !f.startsWith("node_modules/"));
    expect(files).toEqual(
      expect.arrayContaining([
        "bin/fencegate.mjs",
        "dist/fencegate.js",
        "dist/status-page/index.html",
        "dist/status-page/status.js",
        "dist/status-page/status.css",
        "config/embedded.yaml",
        "config/fencegate.service",
        "docs/mqtt-api.md",
        "LICENSE",
        "README.md",
      ]),
    );
    expect(
      files.filter((f) => /^(src|test|firmware-bridge|bench|packages)\//.test(f) || (f.endsWith(".ts") && !f.endsWith(".d.ts"))),
    ).toEqual([]);
    for (const dev of ["tsx", "typescript", "esbuild", "vitest", "zod", "mqtt"])
      expect(existsSync(join(pkg, "node_modules", dev)), dev).toBe(false);
    const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")) as { dependencies: Record<string, string> };
    expect(Object.keys(manifest.dependencies).sort()).toEqual(["@serialport/bindings-cpp", "better-sqlite3"]);
  });

  it("answers fencegate --version", async () => {
    const version = await fencegate("--version");
    const { version: expected } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    expect(version).toMatchObject({ code: 0, stdout: `fencegate ${expected} (Node ${process.versions.node})\n`, stderr: "" });
  });

  it("runs fencegate demo: the stale write lands without fencing and is refused through fencegate", async () => {
    const demo = await fencegate("demo");
    expect(demo.stderr).toBe("");
    expect(demo.code).toBe(0);
    expect(demo.stdout).toContain("REFUSED STALE_TOKEN");
    expect(demo.stdout).toContain("Summary: without fencing the stale write won; with fencegate it was refused.");
  });

  it("installs as docs/deploy.md says: unpacked into a directory, npm install --omit=dev, the unit's command line", async () => {
    expect(deployed.code, deployed.stderr).toBe(0);
    expect(existsSync(join(deployDir, "node_modules/better-sqlite3"))).toBe(true);
    expect(existsSync(join(deployDir, "node_modules/typescript"))).toBe(false);
    const version = await run(process.execPath, [...NODE_FLAGS, join(deployDir, "bin/fencegate.mjs"), "--version"], { cwd: dir });
    expect(version).toMatchObject({ code: 0, stdout: expect.stringMatching(/^fencegate \d+\.\d+\.\d+ /) });
  });
});
