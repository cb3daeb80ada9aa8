/**
 * A Node major upgrade without `npm rebuild`: better-sqlite3's native module was built for
 * another Node. The journal is fine, so the daemon, `doctor` and `log` say what is wrong
 * and where to run `npm rebuild` (exit 78, a configuration problem systemd does not restart
 * into), never "restore the journal from backup".
 *
 * The install is the production build (bin/build.mjs's options) in a directory of its own,
 * its node_modules those of this checkout except better-sqlite3, whose native module is
 * replaced by one that registers itself for another NODE_MODULE_VERSION (compiled here with
 * the system's C compiler): Node refuses it exactly as it refuses a stale build.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { build } from "esbuild";
import { BUILD_OPTIONS } from "../../../bin/build.mjs";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { writeUnconnectedConfig } from "../../support/daemon.ts";
import { runFencegateSync, runToolOrThrow } from "../../support/processes.ts";

const ROOT = path.resolve(import.meta.dirname, "../../..");
/** Another Node's ABI than this one's: what a stale build was made for. */
const OTHER_ABI = process.versions.modules === "137" ? 127 : 137;
const OTHER_NODE = OTHER_ABI === 137 ? 24 : 22;

/** A shared object that registers a Node module built for OTHER_ABI, as a stale better_sqlite3.node does. */
const STALE_ADDON_C = `
struct node_module { int nm_version; unsigned int nm_flags; void* nm_dso_handle; const char* nm_filename;
  void* nm_register_func; void* nm_context_register_func; const char* nm_modname; void* nm_priv; void* nm_link; };
extern void node_module_register(void*);
static void init(void) {}
static struct node_module m = { ${OTHER_ABI}, 0, 0, "stale.c", (void*)init, 0, "better_sqlite3", 0, 0 };
__attribute__((constructor)) static void reg(void) { node_module_register(&m); }
`;

let install: string;
let config: string;
let journal: string;

beforeAll(async () => {
  install = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-stale-native-"));
  fs.writeFileSync(path.join(install, "package.json"), JSON.stringify({ name: "fencegate", version: "0.0.0-test", type: "module" }));
  await build({ ...BUILD_OPTIONS, outdir: path.join(install, "dist"), sourcemap: false, legalComments: "none" });
  const modules = path.join(install, "node_modules");
  fs.mkdirSync(modules);
  for (const name of fs.readdirSync(path.join(ROOT, "node_modules"))) {
    if (name !== "better-sqlite3" && !name.startsWith(".")) fs.symlinkSync(path.join(ROOT, "node_modules", name), path.join(modules, name));
  }
  const sqlite = path.join(modules, "better-sqlite3");
  fs.mkdirSync(path.join(sqlite, "build/Release"), { recursive: true });
  fs.cpSync(path.join(ROOT, "node_modules/better-sqlite3/lib"), path.join(sqlite, "lib"), { recursive: true });
  fs.copyFileSync(path.join(ROOT, "node_modules/better-sqlite3/package.json"), path.join(sqlite, "package.json"));
  fs.writeFileSync(path.join(install, "stale.c"), STALE_ADDON_C);
  runToolOrThrow("cc", ["-shared", "-fPIC", "-o", path.join(sqlite, "build/Release/better_sqlite3.node"), path.join(install, "stale.c")]);

  journal = path.join(install, "state", "journal.db");
  fs.mkdirSync(path.dirname(journal));
  const j = openSqliteJournal({ path: journal, recentLimit: 8 }); // with this checkout's good build
  j.load();
  j.commit([{ actuator: "valve-1", record: { type: "granted", holder: "ctl", token: 3 } }]);
  j.close();
  config = path.join(install, "gateway.yaml");
  writeUnconnectedConfig(config, journal);
}, 120_000);

afterAll(() => install && fs.rmSync(install, { recursive: true, force: true }));

function fencegate(args: string[]) {
  return runFencegateSync(args, { bin: path.join(install, "dist/fencegate.js"), timeoutMs: 60_000 });
}

const SENTENCE = () =>
  `better-sqlite3 was built for Node ${OTHER_NODE} (NODE_MODULE_VERSION ${OTHER_ABI}), and this is Node ${process.versions.node} (${process.versions.modules}): run \`npm rebuild\` in ${install}`;

describe("better-sqlite3 built for another Node", () => {
  it("stops the daemon with exit 78 and the directory to run npm rebuild in, the journal untouched", () => {
    const before = fs.readFileSync(journal);
    const run = fencegate(["daemon", "--config", config, "--log-format", "json"]);
    expect(run.code).toBe(78);
    expect(run.stderr).toContain(`NATIVE_MODULE_MISMATCH: ${SENTENCE()}`);
    expect(run.stderr + run.stdout).not.toMatch(/restore|move it aside/i);
    expect(fs.readFileSync(journal)).toEqual(before);
  });

  it("is what `fencegate log` says, exit 78", () => {
    const run = fencegate(["log", "valve-1", "--config", config]);
    expect(run.code).toBe(78);
    expect(run.stderr).toContain(SENTENCE());
  });

  it("is what `fencegate doctor` says for the journal, with the rebuild as the fix", () => {
    const run = fencegate(["doctor", "--config", config, "--json"]);
    const journalFinding = (
      JSON.parse(run.stdout) as { findings: { check: string; status: string; message: string; fix?: string }[] }
    ).findings.find((f) => f.check === "journal");
    expect(journalFinding).toMatchObject({
      status: "fail",
      message: expect.stringContaining(SENTENCE()),
      fix: expect.stringContaining(`npm rebuild`),
    });
    expect(journalFinding!.fix).not.toMatch(/restore/i);
  });
});
