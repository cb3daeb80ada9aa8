/**
 * The daemon's V8 flags (bin/node-flags.mjs) are on node's command line wherever it is
 * started: the systemd unit, `npm start`, and the commands the docs show. DaemonProcess (tests,
 * benchmark) takes them from bin/node-flags.mjs itself.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { NODE_FLAGS } from "../../../bin/node-flags.mjs";
import { runToolSync } from "../../support/processes.ts";

const ROOT = resolve(import.meta.dirname, "../../..");
const read = (file: string) => readFileSync(resolve(ROOT, file), "utf8");

/** The options between `node` and the script in a command line that runs bin/fencegate.mjs. */
function nodeFlags(command: string): string[] {
  // `npm start` first runs bin/ensure-installed.mjs: the daemon's command follows its `&&`.
  const words = command.split("&&").at(-1)!.trim().split(/\s+/);
  const script = words.findIndex((w) => w.endsWith("bin/fencegate.mjs"));
  expect(script, command).toBeGreaterThan(0);
  expect(words[0], command).toMatch(/(^|\/)node$/);
  return words.slice(1, script);
}

describe("the daemon's node flags", () => {
  it("are options node accepts", () => {
    expect(NODE_FLAGS.length).toBeGreaterThan(0);
    const run = runToolSync(process.execPath, [...NODE_FLAGS, "-e", "0"]);
    expect({ status: run.code, stderr: run.stderr }).toEqual({ status: 0, stderr: "" });
  });

  it("are the unit's ExecStart flags, exactly", () => {
    const execStart = /^ExecStart=(.*)$/m.exec(read("config/fencegate.service"))?.[1];
    expect(execStart).toBeDefined();
    expect(nodeFlags(execStart!)).toEqual(NODE_FLAGS);
  });

  it("are npm start's flags, exactly", () => {
    const scripts = (JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts;
    expect(nodeFlags(scripts["start"]!)).toEqual(NODE_FLAGS);
  });

  it("are in every command the README and docs/deploy.md show for starting the daemon", () => {
    const lines = ["README.md", "docs/deploy.md"].flatMap((file) => read(file).split("\n"));
    // Inline code or a shell line: from the word node to the script.
    const commands = lines
      .map((line) => /(?:^|[\s`])(node\s.*bin\/fencegate\.mjs (?:daemon|start))\b/.exec(line)?.[1])
      .filter((c) => c !== undefined);
    expect(commands.length).toBeGreaterThanOrEqual(2);
    for (const command of commands) expect(nodeFlags(command), command).toEqual(NODE_FLAGS);
  });
});
