/**
 * The controller package as a controller author gets it: packed, installed from the
 * tarball into a plain JavaScript project (no TypeScript, no tsx), and run there against
 * the real daemon, Mosquitto and the simulated valve. Also compiled from TypeScript.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FencegateClient } from "fencegate-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { valve } from "../../support/daemon.ts";
import { filesUnder, npmPack, ROOT, run } from "../../support/packages.ts";
import { startStack, Teardown, type Stack } from "../../support/stack.ts";

const teardown = new Teardown();
let stack: Stack;
let project: string;
let tarball: string;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "client-package",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({ buses: { sim: { type: "tcp", ...sim, timeoutMs: 1000 } }, actuators: [valve("valve-1", "sim", 1)] }),
    fenced: ["valve-1"],
  });
  tarball = await npmPack(ROOT, stack.dir, ["-w", "fencegate-client"]);
  project = join(stack.dir, "controller");
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "plant-controller", private: true, type: "module" }));
  const installed = await run("npm", ["install", tarball], { cwd: project });
  expect(installed.code, installed.stderr).toBe(0);
}, 300_000);

afterAll(() => teardown.run());

const CONTROLLER = `
import { FencegateClient, FencegateError } from "fencegate-client";
const url = process.argv[2];
const out = {};
const a = await FencegateClient.connect({ url, holder: "plain-js-a" });
const lease = await a.acquire("valve-1", { ttlMs: 5000 });
out.token = lease.token;
out.applied = (await lease.command({ position: 42.5 })).applied;
await lease.release();
const b = await FencegateClient.connect({ url, holder: "plain-js-b" });
const newer = await b.acquire("valve-1", { ttlMs: 5000 });
out.newerToken = newer.token;
try {
  // A's old token, as a controller that paused past its lease would send it.
  await a.request("valve-1", "command", { holder: "plain-js-a", token: lease.token, seq: 1000, set: { position: 1 } });
  out.stale = "applied";
} catch (err) {
  out.stale = err instanceof FencegateError ? err.code : String(err);
}
await newer.release();
await a.close();
await b.close();
console.log(JSON.stringify(out));
`;

describe("the controller package", () => {
  it("is compiled ESM with declarations, mqtt its only dependency", () => {
    const installed = join(project, "node_modules/fencegate-client");
    const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
    expect(manifest.dependencies).toEqual({ mqtt: expect.any(String) });
    const files = filesUnder(installed);
    expect(files).toEqual(expect.arrayContaining(["dist/packages/client/src/index.js", "dist/packages/client/src/index.d.ts"]));
    expect(files.filter((f) => /\.ts$/.test(f) && !f.endsWith(".d.ts"))).toEqual([]);
  });

  it("installs no native module and runs no install script", () => {
    const files = filesUnder(join(project, "node_modules"));
    expect(files.filter((f) => f.endsWith(".node") || f.endsWith("binding.gyp"))).toEqual([]);
    const building = files
      .filter((f) => f.endsWith("package.json"))
      .map((f) => ({
        f,
        m: JSON.parse(readFileSync(join(project, "node_modules", f), "utf8")) as { gypfile?: boolean; scripts?: Record<string, string> },
      }))
      .filter(({ m }) => m.gypfile === true || ["preinstall", "install", "postinstall"].some((s) => m.scripts?.[s] !== undefined))
      .map(({ f }) => f);
    expect(building).toEqual([]);
  });

  it("runs a plain JavaScript controller: acquire, a command applied, a stale command refused", async () => {
    writeFileSync(join(project, "controller.js"), CONTROLLER);
    const ran = await run(process.execPath, ["controller.js", stack.broker.url], { cwd: project, timeoutMs: 30_000 });
    expect(ran.stderr).toBe("");
    expect(ran.code).toBe(0);
    const out = JSON.parse(ran.stdout);
    expect(out).toEqual({ token: expect.any(Number), applied: { position: 42.5 }, newerToken: out.token + 1, stale: "STALE_TOKEN" });
    expect(stack.sim.device(1).targetPosition).toBe(42.5);
  });

  it("runs its README's example as it stands, in a project npm init -y made (CommonJS), as controller.mjs", async () => {
    const readme = readFileSync(join(ROOT, "packages/client/README.md"), "utf8");
    const snippet = /<!-- client-readme-test -->\n```js\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(snippet).toBeDefined();
    const plain = join(stack.dir, "plain-project");
    mkdirSync(plain);
    expect((await run("npm", ["init", "-y"], { cwd: plain })).code).toBe(0);
    expect((await run("npm", ["install", tarball], { cwd: plain })).code).toBe(0);
    writeFileSync(join(plain, "controller.mjs"), snippet!);
    // Another controller holds valve-1 for a while: the example stands by until it is free.
    const other = await FencegateClient.connect({ url: stack.broker.url, holder: "other-line" });
    const held = await other.acquire("valve-1", { ttlMs: 5000 });
    const releasing = new Promise((resolve) => setTimeout(resolve, 1500)).then(() => held.release());
    try {
      const ran = await run(process.execPath, ["controller.mjs"], {
        cwd: plain,
        env: { FENCEGATE_BROKER: stack.broker.url },
        timeoutMs: 30_000,
      });
      await releasing;
      expect(ran.stderr).toBe("");
      expect(ran.code).toBe(0);
      const lines = ran.stdout.trim().split("\n");
      expect(lines[0]).toBe(`holding valve-1 with token ${held.token + 1}`);
      expect(lines.slice(1)).toEqual([
        `applied {"position":42.5} as seq 0`,
        `position 42.5, fence ${held.token + 1}/0`,
        "state: online true",
      ]);
      expect(ran.ms).toBeGreaterThan(1400); // it waited out LEASE_HELD, not failed at it
    } finally {
      await other.close();
    }
  });

  it("type-checks a TypeScript controller against its declarations", async () => {
    writeFileSync(
      join(project, "controller.ts"),
      `import { FencegateClient, FencegateError, type Lease } from "fencegate-client";
const client: FencegateClient = await FencegateClient.connect({ url: "mqtt://127.0.0.1:1883", holder: "ts" });
const lease: Lease = await client.acquire("valve-1", { ttlMs: 3000 });
const { applied, seq }: { applied: Readonly<Record<string, number>>; seq: number } = await lease.command({ position: 1 });
const refused = (err: unknown): string | null => (err instanceof FencegateError ? err.code : null);
export { applied, seq, refused };
`,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2022",
          strict: true,
          noEmit: true,
          types: ["node"],
          typeRoots: [join(ROOT, "node_modules/@types")],
        },
        files: ["controller.ts"],
      }),
    );
    const checked = await run(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", "."], { cwd: project });
    expect(checked.stdout + checked.stderr).toBe("");
    expect(checked.code).toBe(0);
  });
});
