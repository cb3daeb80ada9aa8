/** The default simulator run, part 4 of 4: 250 seeds (4 files so the runner can use both cores). */
import { describe } from "vitest";
import { checkSeeds } from "./seed-range.ts";

describe("deterministic simulation", () => checkSeeds(751, 250));
