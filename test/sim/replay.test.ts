/** One seed determines everything: the same seed replays the same history, bit for bit. */
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { runSeed } from "../../src/sim/run.ts";

describe("replay by seed", () => {
  it("the same seed gives the identical history hash and figures", async () => {
    for (const seed of [7, 4242]) {
      const a = await runSeed(seed);
      const b = await runSeed(seed);
      expect(b.hash).toBe(a.hash);
      expect({ ...b, faults: [...b.faults], refused: [...b.refused] }).toEqual({ ...a, faults: [...a.faults], refused: [...a.refused] });
    }
  });

  it("different seeds give different histories", async () => {
    const hashes = new Set<string>();
    for (const seed of [1, 2, 3]) hashes.add((await runSeed(seed)).hash);
    expect(hashes.size).toBe(3);
  });

  it("nothing in the simulator draws randomness or time from outside the seed", () => {
    const dir = new URL("../../src/sim/", import.meta.url);
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
      const text = readFileSync(new URL(file, dir), "utf8");
      expect(text, file).not.toMatch(/Math\.random|setTimeout|setInterval/);
      // main.ts may pick where an unseeded batch starts; it prints every seed it runs.
      if (file !== "main.ts") expect(text, file).not.toMatch(/Date\.now|performance\.now/);
    }
  });
});
