/**
 * The long-run tools a newcomer starts from the README (`npm run sim`, `npm run chaos`):
 * --help answers with the usage, a wrong option is a usage error in two lines, never a stack trace.
 */
import { describe, expect, it } from "vitest";
import { runToolSync } from "../../support/processes.ts";

const RUNNERS = [
  ["npm run sim", "src/sim/main.ts", "--seeds"],
  ["npm run chaos", "test/system/chaos/main.ts", "--kills"],
] as const;

function run(script: string, ...args: string[]) {
  return runToolSync(process.execPath, ["--import", "tsx", script, ...args], { timeoutMs: 30_000 });
}

describe.each(RUNNERS)("%s", (command, script, option) => {
  it("answers --help with its usage, exit 0", () => {
    const r = run(script, "--help");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`usage: ${command} -- `);
    expect(r.stdout).toContain(option);
  });

  it("refuses an unknown option: exit 64, the usage, no stack trace", () => {
    const r = run(script, "--bogus");
    expect(r.code).toBe(64);
    expect(r.stderr).toContain(`usage: ${command} -- `);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
