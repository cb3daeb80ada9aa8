/**
 * bin/ensure-installed.mjs, which runs before `npm start` and `npm test` so that each works
 * as the first command in a fresh clone. (That it runs npm ci there and rebuilds
 * better-sqlite3 for another Node is what .ci/run does on every run: its log says so.)
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { missingPackages, satisfiesEngine, TEST_TOOLS } from "../../../bin/ensure-installed.mjs";
import { nobodyCanRead, runToolSync } from "../../support/processes.ts";

const ROOT = resolve(import.meta.dirname, "../../..");
const dir = mkdtempSync(join(tmpdir(), "fencegate-ensure-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("bin/ensure-installed.mjs", () => {
  it("finds the packages node_modules lacks, the workspaces' and their dependencies included", () => {
    const root = join(dir, "clone");
    mkdirSync(join(root, "packages/lib"), { recursive: true });
    writeFileSync(
      join(root, "package.json"),
      JSON.stringify({ workspaces: ["packages/lib"], dependencies: { present: "1" }, devDependencies: { absent: "1" } }),
    );
    writeFileSync(join(root, "packages/lib/package.json"), JSON.stringify({ name: "lib", dependencies: { "@scope/dep": "1" } }));
    mkdirSync(join(root, "node_modules/present"), { recursive: true });
    writeFileSync(join(root, "node_modules/present/package.json"), "{}");
    expect(missingPackages(root).sort()).toEqual(["@scope/dep", "absent", "lib"]);
    expect(missingPackages(ROOT)).toEqual([]);
  });

  it("expects a workspace's optional dependency only on a Node its locked engines allow", () => {
    const root = join(dir, "optional");
    mkdirSync(join(root, "tests/runtime"), { recursive: true });
    writeFileSync(join(root, "package.json"), JSON.stringify({ workspaces: ["tests/runtime"] }));
    writeFileSync(
      join(root, "tests/runtime/package.json"),
      JSON.stringify({ name: "runtime", optionalDependencies: { "new-runtime": "npm:runtime@5" } }),
    );
    writeFileSync(
      join(root, "package-lock.json"),
      JSON.stringify({ packages: { "node_modules/new-runtime": { version: "5.0.7", optional: true, engines: { node: ">=22.9" } } } }),
    );
    mkdirSync(join(root, "node_modules/runtime"), { recursive: true });
    writeFileSync(join(root, "node_modules/runtime/package.json"), "{}");
    expect(missingPackages(root, "20.20.2")).toEqual([]);
    expect(missingPackages(root, "22.9.0")).toEqual(["new-runtime"]);
    expect(missingPackages(root, "24.11.1")).toEqual(["new-runtime"]);
  });

  it.each([
    ["20.20.2", ">=22.9", false],
    ["22.9.0", ">=22.9", true],
    ["20.19.0", "^20.19.0 || ^22.12.0 || ^24.0.0", true],
    ["22.11.0", "^20.19.0 || ^22.12.0 || ^24.0.0", false],
    ["25.0.0", "^20.19.0 || ^22.12.0 || ^24.0.0", false],
    ["24.3.1", "20.x || 22.x || 23.x || 24.x || 25.x", true],
    ["13.0.0", "^12.22 || ^14.13 || >=16", false],
    ["14.1.9", "~14.1", true],
    ["14.2.0", "~14.1", false],
    ["0.3.0", "^0.2.3", false],
    ["21.0.0", ">=18 <21", false],
    ["25.0.0", "<=20", false],
    ["20.5.0", ">20", false],
    ["20.1.0", "18 - 21", false], // a hyphen range: not read, so not expected
  ])("reads Node %s against the engines range %s: %s", (version, range, expected) => {
    expect(satisfiesEngine(version, range)).toBe(expected);
  });

  // As root it would install the tools with apt-get; as anyone else it names them in one
  // line. So it runs as nobody (uid 65534), who must be able to run this node and read the
  // checkout (not so under /root, for one), as in test/system/doctor/doctor.test.ts.
  const nobodyCanRun = process.getuid?.() === 0 && nobodyCanRead(join(ROOT, "bin/ensure-installed.mjs"));
  it.skipIf(!nobodyCanRun)("names the Debian packages the tests need, in one line, when it may not install them", () => {
    const bin = join(dir, "bin");
    mkdirSync(bin);
    chmodSync(dir, 0o755);
    symlinkSync(process.execPath, join(bin, "node"));
    symlinkSync("/bin/sh", join(bin, "sh")); // a PATH with node and sh, none of the tools
    const run = runToolSync(join(bin, "node"), [join(ROOT, "bin/ensure-installed.mjs"), "--test"], {
      uid: 65534,
      gid: 65534,
      env: { PATH: bin },
      envOnly: true,
    });
    const packages = [...new Set(Object.values(TEST_TOOLS))].join(" ");
    expect({ status: run.code, stdout: run.stdout, stderr: run.stderr }).toEqual({
      status: 1,
      stdout: "",
      stderr: `fencegate: the tests drive tools this machine lacks; install them, then run npm test again: sudo apt-get install -y ${packages}\n`,
    });
  });
});
