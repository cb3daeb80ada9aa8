/**
 * bin/ensure-installed.mjs, which runs before `npm start` and `npm test` so that each works
 * as the first command in a fresh clone. (That it runs npm ci there and rebuilds
 * better-sqlite3 for another Node is what .ci/run does on every run: its log says so.)
 */
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { missingPackages, TEST_TOOLS } from "../../bin/ensure-installed.mjs";

const ROOT = resolve(import.meta.dirname, "../..");
const dir = mkdtempSync(join(tmpdir(), "fencegate-ensure-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("bin/ensure-installed.mjs", () => {
  it("finds the packages node_modules lacks, the workspaces' and their dependencies included", () => {
    const root = join(dir, "clone");
    mkdirSync(join(root, "packages/lib"), { recursive: true });
    writeFileSync(join(root, "package.json"), JSON.stringify({ workspaces: ["packages/lib"], dependencies: { present: "1" }, devDependencies: { absent: "1" } }));
    writeFileSync(join(root, "packages/lib/package.json"), JSON.stringify({ name: "lib", dependencies: { "@scope/dep": "1" } }));
    mkdirSync(join(root, "node_modules/present"), { recursive: true });
    writeFileSync(join(root, "node_modules/present/package.json"), "{}");
    expect(missingPackages(root).sort()).toEqual(["@scope/dep", "absent", "lib"]);
    expect(missingPackages(ROOT)).toEqual([]);
  });

  // As root it would install the tools with apt-get; as anyone else it names them in one
  // line. So it runs as nobody (uid 65534), who must be able to run this node and read the
  // checkout (not so under /root, for one), as in test/doctor/doctor.test.ts.
  const nobodyCanRun =
    process.getuid?.() === 0 && spawnSync(process.execPath, ["-e", `require("fs").accessSync(${JSON.stringify(join(ROOT, "bin/ensure-installed.mjs"))}, 4)`], { uid: 65534, gid: 65534 }).status === 0;
  it.skipIf(!nobodyCanRun)("names the Debian packages the tests need, in one line, when it may not install them", () => {
    const bin = join(dir, "bin");
    mkdirSync(bin);
    chmodSync(dir, 0o755);
    symlinkSync(process.execPath, join(bin, "node"));
    symlinkSync("/bin/sh", join(bin, "sh")); // a PATH with node and sh, none of the tools
    const run = spawnSync(join(bin, "node"), [join(ROOT, "bin/ensure-installed.mjs"), "--test"], { uid: 65534, gid: 65534, env: { PATH: bin }, encoding: "utf8" });
    const packages = [...new Set(Object.values(TEST_TOOLS))].join(" ");
    expect({ status: run.status, stdout: run.stdout, stderr: run.stderr }).toEqual({
      status: 1,
      stdout: "",
      stderr: `fencegate: the tests drive tools this machine lacks; install them, then run npm test again: sudo apt-get install -y ${packages}\n`,
    });
  });
});
