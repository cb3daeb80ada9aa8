/**
 * What the build (bin/build.mjs) puts in the bundle the daemon loads at start. zod's `z`
 * named export is an object holding all of zod, locales included, so one `import { z }`
 * anywhere keeps esbuild from leaving any of it out: 450 KB more JavaScript loaded at start
 * and about 6 MB more resident on Node 24 (docs/deploy.md, "Memory"). `import * as z`
 * lets it drop what no schema uses.
 */
import { build } from "esbuild";
import { describe, expect, it } from "vitest";
import { BUILD_OPTIONS } from "../../../bin/build.mjs";

describe("the build", () => {
  it("carries of zod's locales only the English one its messages use", async () => {
    const { metafile } = await build({ ...BUILD_OPTIONS, write: false, metafile: true, logLevel: "silent" });
    const locales = new Set<string>();
    for (const output of Object.values(metafile.outputs)) {
      for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
        if (bytesInOutput > 0 && input.includes("node_modules/zod/") && input.includes("/locales/"))
          locales.add(input.replace(/.*\/locales\//, ""));
      }
    }
    expect([...locales]).toEqual(["en.js"]);
  });
});
