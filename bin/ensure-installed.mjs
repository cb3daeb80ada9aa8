#!/usr/bin/env node
// Runs before `npm start` and `npm test`, so that each works as the first command typed in a
// fresh clone: installs what is missing (npm ci; a native module built for another Node is
// rebuilt; for the tests, the Debian tools they drive), saying so in one line, then returns.
// Node built-ins only: it runs before any dependency exists.
//
//   node bin/ensure-installed.mjs          the dependencies
//   node bin/ensure-installed.mjs --test   and the tools the test suite runs
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** Command → the Debian package that has it. The tests drive these real tools (.ci/run says why each). */
export const TEST_TOOLS = {
  socat: "socat",
  mbpoll: "mbpoll",
  mosquitto: "mosquitto",
  mosquitto_rr: "mosquitto-clients",
  openssl: "openssl",
  "systemd-analyze": "systemd",
  strace: "strace",
  chromium: "chromium",
  etcd: "etcd-server",
};

function say(line) {
  console.error(`fencegate: ${line}`);
}

function run(command, args, env = process.env) {
  const r = spawnSync(command, args, { cwd: ROOT, stdio: "inherit", env });
  if (r.status !== 0) {
    say(`\`${[command, ...args].join(" ")}\` failed (${r.error?.message ?? `exit ${r.status}`}); fix that, then run the command again.`);
    process.exit(r.status || 1);
  }
}

/**
 * Whether `version` (22.9.0) lies in an engines range as npm writes them: `||` of
 * space-separated `>=`, `>`, `<=`, `<`, `^`, `~`, exact and `x` comparators. A range it
 * cannot read counts as not satisfied: the package is then not expected, rather than npm ci
 * run again on every start for a package npm skips.
 */
export function satisfiesEngine(version, range) {
  const v = version.replace(/^v/, "").split(".").map(Number);
  const compare = (a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
  const one = (comparator) => {
    const m = /^(>=|<=|>|<|=|\^|~)?v?(\d+|x|\*)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?$/.exec(comparator);
    if (!m) return false;
    const [, op = "=", ...parts] = m;
    const given = parts.filter((p) => p !== undefined && p !== "x" && p !== "*").map(Number);
    const low = [given[0] ?? 0, given[1] ?? 0, given[2] ?? 0];
    const c = compare(v, low);
    if (op === ">=") return c >= 0;
    if (op === "<") return c < 0;
    if (given.length === 0) return op !== ">";
    // The first version past `given` (^ and ~: past what they allow): <=20 is <21.0.0, >20 is >=21.0.0.
    const bump =
      op === "^"
        ? given.findIndex((n, i) => n !== 0 || i === given.length - 1)
        : op === "~"
          ? Math.min(1, given.length - 1)
          : given.length - 1;
    const high = low.map((n, i) => (i < bump ? n : i === bump ? n + 1 : 0));
    if (op === ">") return given.length === 3 ? c > 0 : compare(v, high) >= 0;
    if (op === "<=") return given.length === 3 ? c <= 0 : compare(v, high) < 0;
    return c >= 0 && (op === "=" && given.length === 3 ? c === 0 : compare(v, high) < 0);
  };
  return range.split("||").some((alternative) => alternative.trim().split(/\s+/).filter(Boolean).every(one));
}

/**
 * The workspaces' optional dependencies that npm ci installs on this Node and platform (by
 * the lockfile): Node-RED 5 is one, on Node >= 22.9 only (test/node-red-5/package.json).
 */
function expectedOptional(root, manifests, nodeVersion) {
  const lockFile = join(root, "package-lock.json");
  if (!existsSync(lockFile)) return [];
  const locked = JSON.parse(readFileSync(lockFile, "utf8")).packages ?? {};
  const fits = (list, value) =>
    list === undefined ||
    (list.includes(value) && !list.includes(`!${value}`)) ||
    (list.every((x) => x.startsWith("!")) && !list.includes(`!${value}`));
  return manifests
    .flatMap((m) => Object.keys(m.optionalDependencies ?? {}))
    .filter((name) => {
      const entry = locked[`node_modules/${name}`];
      return (
        entry !== undefined &&
        (entry.engines?.node === undefined || satisfiesEngine(nodeVersion, entry.engines.node)) &&
        fits(entry.os, process.platform) &&
        fits(entry.cpu, process.arch)
      );
    });
}

/** Packages in package.json (and its workspaces') that node_modules lacks; optional ones if this Node can run them. */
export function missingPackages(root = ROOT, nodeVersion = process.versions.node) {
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const manifests = [manifest, ...(manifest.workspaces ?? []).map((w) => JSON.parse(readFileSync(join(root, w, "package.json"), "utf8")))];
  const names = new Set(manifests.flatMap((m) => [...Object.keys(m.dependencies ?? {}), ...Object.keys(m.devDependencies ?? {})]));
  for (const m of manifests.slice(1)) names.add(m.name);
  for (const name of expectedOptional(root, manifests, nodeVersion)) names.add(name);
  return [...names].filter((name) => !existsSync(join(root, "node_modules", name, "package.json")));
}

/** null when better-sqlite3 loads in this Node; otherwise why not (built for another Node, usually). */
function nativeProblem() {
  try {
    const Database = createRequire(join(ROOT, "package.json"))("better-sqlite3");
    new Database(":memory:").close();
    return null;
  } catch (err) {
    const abi = /NODE_MODULE_VERSION (\d+)[\s\S]*NODE_MODULE_VERSION (\d+)/.exec(err.message);
    return abi ? `it was built for NODE_MODULE_VERSION ${abi[1]}, this Node needs ${abi[2]}` : err.message.replace(/\s+/g, " ");
  }
}

function onPath(command) {
  return spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0;
}

export function missingTools() {
  return [
    ...new Set(
      Object.entries(TEST_TOOLS)
        .filter(([command]) => !onPath(command))
        .map(([, pkg]) => pkg),
    ),
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const missing = missingPackages();
  if (missing.length > 0) {
    say(
      `installing the dependencies first (npm ci): node_modules lacks ${missing.slice(0, 3).join(", ")}${missing.length > 3 ? ` and ${missing.length - 3} more` : ""}`,
    );
    run("npm", ["ci", "--no-audit", "--no-fund"]);
  } else {
    const problem = nativeProblem();
    if (problem) {
      say(`rebuilding the native modules for Node ${process.versions.node} (${problem})`);
      run("npm", ["rebuild", "better-sqlite3"]);
    }
  }
  if (process.argv.includes("--test")) {
    const tools = missingTools();
    if (tools.length > 0 && process.getuid?.() === 0) {
      say(`installing the Debian packages the tests drive: ${tools.join(" ")}`);
      const apt = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
      run("apt-get", ["update", "-qq"], apt);
      run("apt-get", ["install", "-y", "-qq", ...tools], apt);
    } else if (tools.length > 0) {
      say(`the tests drive tools this machine lacks; install them, then run npm test again: sudo apt-get install -y ${tools.join(" ")}`);
      process.exit(1);
    }
  }
}
