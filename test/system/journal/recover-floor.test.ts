/**
 * `fencegate journal recover --floor N`: a floor far above what the journal and its mark
 * know (a few digits too many) would use up an actuator's tokens for good, so it needs
 * `--yes`, and the refusal says how many grants such a floor leaves; nothing changes
 * without it.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { writeUnconnectedConfig } from "../../support/daemon.ts";
import { runFencegateSync } from "../../support/processes.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-floor-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let dirs = 0;

/** A journal with token 5 granted to valve-1, stopped cleanly, and its configuration. */
function installation(): { config: string; journal: string } {
  const dir = fs.mkdtempSync(path.join(root, `d${++dirs}-`));
  const journal = path.join(dir, "journal.db");
  const j = openSqliteJournal({ path: journal, recentLimit: 8 });
  j.load();
  j.commit([{ actuator: "valve-1", record: { type: "granted", holder: "ctl", token: 5 } }]);
  j.close();
  const config = path.join(dir, "gateway.yaml");
  writeUnconnectedConfig(config, journal);
  return { config, journal };
}

function recover(args: string[]) {
  return runFencegateSync(["journal", "recover", ...args], { timeoutMs: 60_000 });
}

function highestGranted(journal: string): number | undefined {
  const j = openSqliteJournal({ path: journal, recentLimit: 8 });
  try {
    return j.load().get("valve-1")?.highestGranted;
  } finally {
    j.close();
  }
}

describe("journal recover --floor", () => {
  it("refuses a floor far above the journal's and the mark's ceilings without --yes, saying how many grants it leaves", () => {
    const { config, journal } = installation();
    const run = recover(["--config", config, "--floor", "9007199254740990"]);
    expect(run.code).toBe(64);
    expect(run.stderr).toMatch(/9007199254740990 is far above .*1000005/);
    expect(run.stderr).toMatch(/leaves 1 grant/);
    expect(run.stderr).toMatch(/--yes/);
    expect(highestGranted(journal)).toBe(5);
  });

  it("sets such a floor with --yes and says how many grants remain", () => {
    const { config, journal } = installation();
    const run = recover(["--config", config, "--floor", "9007199254740990", "--yes"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/valve-1: the next token is above 9007199254740990.*1 grant left/);
    expect(highestGranted(journal)).toBe(9007199254740990);
  });

  it("sets a floor within reach of what the journal knows without asking", () => {
    const { config, journal } = installation();
    const run = recover(["--config", config, "--floor", "40000"]);
    expect(run.code).toBe(0);
    expect(highestGranted(journal)).toBe(40000);
  });
});
