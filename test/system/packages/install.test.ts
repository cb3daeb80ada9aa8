/**
 * The first commands in a fresh clone, before anything is installed: npm ci's install says
 * nothing alarming on the oldest Node the project supports, and npm pack typed too early
 * says what to do.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT, run } from "../../support/packages.ts";

const dir = mkdtempSync(join(tmpdir(), "fencegate-install-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A clone's manifests and lockfile, nothing installed: what npm ci reads. */
function manifestsCopy(name: string, extra: readonly string[] = []): string {
  const root = join(dir, name);
  const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { workspaces: string[] };
  for (const entry of ["package.json", "package-lock.json", ...manifest.workspaces.map((w) => `${w}/package.json`), ...extra])
    cpSync(join(ROOT, entry), join(root, entry), { recursive: true });
  return root;
}

describe("a fresh clone", () => {
  // On Node 20 a devDependency that wants Node 22.9 (Node-RED 5) made every npm ci, and so
  // the first npm start and npm test, open with an EBADENGINE warning.
  it(`installs with npm ci without an engine warning on Node ${process.versions.node}`, async () => {
    const root = manifestsCopy("ci");
    const ci = await run("npm", ["ci", "--dry-run", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], {
      cwd: root,
      timeoutMs: 120_000,
    });
    expect(ci.code, ci.stderr).toBe(0);
    expect(ci.stderr).not.toMatch(/EBADENGINE|npm warn/);
  });

  it("answers npm pack before npm ci with what to do, not a stack trace", async () => {
    const root = manifestsCopy("pack", ["bin"]);
    const pack = await run("npm", ["pack", "--dry-run"], { cwd: root, timeoutMs: 60_000 });
    expect(pack.code).not.toBe(0);
    expect(pack.stderr).toContain("node_modules lacks esbuild: run `npm ci` first, then this command again.");
    expect(pack.stderr).not.toMatch(/\n\s+at /);
  });
});
