/** `npm run demo` on a clean checkout: exits 0 and shows the stale write applied, then refused. */
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { runTool } from "../support/processes.ts";

describe("npm run demo", () => {
  it("shows the stale write applied without fencing and refused through fencegate, and exits 0", async () => {
    const demo = await runTool("npm", ["run", "--silent", "demo"], { cwd: resolve(import.meta.dirname, "../.."), timeoutMs: 90_000 });
    expect(demo.code, demo.stderr).toBe(0);
    const stdout = demo.stdout;
    expect(stdout).toMatch(/A\s+wrote position=90 to the device\s+-> device at 90 %/);
    expect(stdout).toContain("Result: the valve is at 90 %. B's position was overwritten");
    expect(stdout).toMatch(/gateway\s+REFUSED STALE_TOKEN/);
    expect(stdout).toContain("Result: the valve is at 20 %. A's stale command was refused");
    expect(stdout).toContain("Summary: without fencing the stale write won; with fencegate it was refused.");
  });
});
