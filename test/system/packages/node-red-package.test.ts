/// <reference lib="dom" />
/**
 * The Node-RED package as a user gets it: `npm pack`, the tarball installed with the
 * controller package's into a Node-RED user directory (~/.node-red on a Pi), and a real
 * Node-RED started there (4.1 on Node 20, 5.x on Node 24) with the package's example flow,
 * against the real daemon, Mosquitto and the simulated valve. Node-RED finds the package
 * by itself, lists the example in its import menu, and the editor (headless chromium)
 * shows the palette category, each node's help and the live statuses. With
 * UPDATE_SCREENSHOT=1 it writes docs/node-red-editor.png.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchChromium } from "../../support/chromium.ts";
import { valve } from "../../support/daemon.ts";
import { installNodeRedPackage, nodeRedRuntime, type InstalledPackage } from "../../support/node-red.ts";
import { filesUnder } from "../../support/packages.ts";
import { freePort, waitForPort } from "../../support/ports.ts";
import { startProcess } from "../../support/processes.ts";
import { startStack, Teardown, type Stack } from "../../support/stack.ts";
import { until } from "../../support/watch.ts";

const SCREENSHOT = resolve(import.meta.dirname, "../../../docs/node-red-editor.png");
const TYPES = ["fencegate-broker", "fencegate-lease", "fencegate-command", "fencegate-state"];

const teardown = new Teardown();
const runtime = nodeRedRuntime();
let stack: Stack;
let installed: InstalledPackage;
let editor: string;
let nodeRedOutput = "";
let page: Page;

async function adminGet(path: string, accept = "application/json"): Promise<{ status: number; body: string }> {
  const res = await fetch(`${editor}${path}`, { headers: { accept } });
  return { status: res.status, body: await res.text() };
}

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "node-red-package",
    sim: () => ({ units: [1], rate: 0 }),
    gateway: (sim) => ({ buses: { sim: { type: "tcp", ...sim, timeoutMs: 1000 } }, actuators: [valve("valve-1", "sim", 1)] }),
    fenced: ["valve-1"],
  });
  installed = await installNodeRedPackage(stack.dir);
  // The example as a user imports it, its brokers pointed at this test's; no first-run tour over the editor.
  const example = JSON.parse(readFileSync(join(installed.packageDir, "examples/primary-and-standby.json"), "utf8")) as Record<
    string,
    unknown
  >[];
  writeFileSync(
    join(installed.userDir, "flows.json"),
    JSON.stringify(example.map((n) => (n.type === "fencegate-broker" ? { ...n, url: stack.broker.url } : n))),
  );
  const port = await freePort();
  writeFileSync(
    join(installed.userDir, "settings.js"),
    `module.exports = ${JSON.stringify({ uiPort: port, uiHost: "127.0.0.1", flowFile: "flows.json", credentialSecret: false, editorTheme: { tours: false, projects: { enabled: false } }, telemetry: { enabled: false }, logging: { console: { level: "info" } } })};\n`,
  );
  editor = `http://127.0.0.1:${port}`;
  const nodeRed = startProcess(teardown, process.execPath, [
    runtime.cli,
    "--userDir",
    installed.userDir,
    "--settings",
    join(installed.userDir, "settings.js"),
  ]);
  nodeRed.stdout!.on("data", (d: Buffer) => (nodeRedOutput += d.toString()));
  nodeRed.stderr!.on("data", (d: Buffer) => (nodeRedOutput += d.toString()));
  await waitForPort(port, 60_000).catch((err: Error) => {
    throw new Error(`Node-RED did not start: ${err.message}\n${nodeRedOutput}`);
  });
  await until(() => nodeRedOutput.includes("Started flows"), {
    what: `Node-RED to start the flows:\n${nodeRedOutput}`,
    timeoutMs: 30_000,
    everyMs: 50,
  });
  const context = await launchChromium(teardown, { width: 1280, height: 760 });
  page = context.pages()[0] ?? (await context.newPage());
}, 300_000);

afterAll(() => teardown.run());

describe("the Node-RED package", () => {
  it("packs the nodes, their help, the example and the README; only fencegate-client at run time", () => {
    const manifest = JSON.parse(readFileSync(join(installed.packageDir, "package.json"), "utf8"));
    expect(manifest).toMatchObject({
      name: "@fencegate/node-red",
      keywords: expect.arrayContaining(["node-red"]),
      "node-red": { nodes: { fencegate: "nodes/fencegate.js" } },
    });
    expect(manifest.dependencies).toEqual({ "fencegate-client": expect.any(String) });
    expect(filesUnder(installed.packageDir).sort()).toEqual(
      [
        "LICENSE",
        "README.md",
        "package.json",
        "examples/primary-and-standby.json",
        "nodes/fencegate.html",
        "nodes/fencegate.js",
        ...["connections", "lease-keeper", "names", "register", "setpoints"].map((f) => `nodes/lib/${f}.mjs`),
      ].sort(),
    );
  });

  it(`installs into a Node-RED user directory, where Node-RED ${runtime.version} loads it by itself`, async () => {
    const { status, body } = await adminGet("/nodes");
    expect(status).toBe(200);
    const sets = JSON.parse(body) as { id: string; module: string; types: string[]; enabled: boolean; loaded: boolean; err?: string }[];
    const ours = sets.filter((s) => s.module === "@fencegate/node-red");
    expect(ours).toEqual([expect.objectContaining({ id: "@fencegate/node-red/fencegate", types: TYPES, enabled: true, version: "0.1.0" })]);
    expect(ours[0]!.err).toBeUndefined();
    expect(nodeRedOutput).not.toMatch(/\[error\]/);
  });

  it("lists the example flow in the import menu's examples", async () => {
    // What Import > Examples asks: the modules with examples, then ours, then the flow.
    expect(JSON.parse((await adminGet("/library/examples/flows/")).body)).toContain("@fencegate/node-red");
    expect(JSON.parse((await adminGet("/library/examples/flows/@fencegate/node-red")).body)).toEqual([{ fn: "primary-and-standby" }]);
    const example = await adminGet("/library/examples/flows/@fencegate/node-red/primary-and-standby");
    expect(JSON.parse(example.body)).toEqual(
      JSON.parse(readFileSync(join(installed.packageDir, "examples/primary-and-standby.json"), "utf8")),
    );
  });

  it("shows the fencegate palette category with lease, command and state, the example's statuses live, and each node's help", async () => {
    await page.goto(editor);
    const palette = page.locator("#red-ui-palette-container-fencegate");
    await palette.waitFor({ timeout: 30_000 });
    expect(
      await palette.locator(".red-ui-palette-node").evaluateAll((nodes) => nodes.map((n) => n.getAttribute("data-palette-type"))),
    ).toEqual(["fencegate-lease", "fencegate-command", "fencegate-state"]);
    expect(await palette.locator(".red-ui-palette-label").allTextContents()).toEqual(["lease", "command", "state"]);
    // The deployed example, live: the primary holds, and says so on its node.
    await page.waitForFunction(
      () =>
        Array.from(document.querySelectorAll(".red-ui-flow-node-status-label")).some((l) => /^held, token \d+$/.test(l.textContent ?? "")),
      undefined,
      { timeout: 15_000 },
    );
    const res = await fetch(`${editor}/inject/fg0ainject000001`, { method: "POST" });
    expect(res.status).toBe(200);
    await page.waitForFunction(
      () =>
        Array.from(document.querySelectorAll(".red-ui-flow-node-status-label")).some((l) =>
          /^applied, token \d+ seq 0$/.test(l.textContent ?? ""),
        ),
      undefined,
      { timeout: 15_000 },
    );
    if (process.env.UPDATE_SCREENSHOT === "1") {
      await page.locator("#red-ui-palette-search input").pressSequentially("fencegate"); // the palette shows our category alone
      await page.locator('.red-ui-palette-node[data-palette-type="inject"]').waitFor({ state: "hidden" });
      await page.screenshot({ path: SCREENSHOT });
    }
    for (const [type, opening] of [
      ["fencegate-lease", "Acquires and keeps a lease on one actuator"],
      ["fencegate-command", "Sends setpoints to an actuator under the lease"],
      ["fencegate-state", "Follows an actuator"],
      ["fencegate-broker", "Where the fencegate gateways are"],
    ] as const) {
      const help = await page.evaluate(
        (t) => (window as unknown as { RED: { nodes: { getNodeHelp(type: string): string } } }).RED.nodes.getNodeHelp(t),
        type,
      );
      expect(help, type).toContain(opening);
    }
  });
});
