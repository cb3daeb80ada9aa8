/**
 * A missing journal is never replaced by a fresh one behind the operator's back: an
 * unmounted disk or partition would otherwise hand out token 1 again while a paused
 * controller still holds it. The daemon stops (exit 74) naming the path and the two ways on;
 * a journal is created by `fencegate journal init`, or by `journal.createIfMissing`, which
 * only the embedded demo configuration sets.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import { loadConfigFile } from "../../../src/config/load.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { EMBEDDED_CONFIG } from "../../../src/cli/start.ts";
import { JournalError } from "../../../src/shell/ports.ts";
import { fatalLine, gatewayConfig, valve, writeUnconnectedConfig } from "../../support/daemon.ts";
import { runFencegate } from "../../support/processes.ts";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "fencegate-missing-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const newDir = (): string => fs.mkdtempSync(path.join(root, `d${++dirs}-`));

function refusedOpen(file: string): JournalError {
  try {
    openSqliteJournal({ path: file, recentLimit: 8, createIfMissing: false }).close();
  } catch (error) {
    expect(error).toBeInstanceOf(JournalError);
    return error as JournalError;
  }
  throw new Error(`expected ${file} to be refused`);
}

describe("a missing journal", () => {
  it("is refused, not created, when creating is not asked for: the path and the two ways on", () => {
    const dir = newDir();
    const file = path.join(dir, "journal.db");
    const e = refusedOpen(file);
    expect(e.code).toBe("JOURNAL_MISSING");
    expect(e.message).toContain(file);
    expect(e.message).toMatch(/mount/);
    expect(e.message).toMatch(/fencegate journal init/);
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it("in a directory that is gone (an unmounted disk) is refused, and the directory is not made", () => {
    const dir = path.join(newDir(), "usb");
    const file = path.join(dir, "journal.db");
    const e = refusedOpen(file);
    expect(e.code).toBe("JOURNAL_MISSING");
    expect(e.message).toContain(`${dir} does not exist`);
    expect(fs.existsSync(dir)).toBe(false);
  });

  it("stops the daemon with exit 74 and the init command for its configuration, creating nothing", async () => {
    const dir = newDir();
    const journalDir = path.join(dir, "state");
    const config = writeUnconnectedConfig(path.join(dir, "gateway.yaml"), path.join(journalDir, "journal.db"), { createIfMissing: false });
    const run = await runFencegate(["daemon", "--config", config, "--log-format", "json"], { timeoutMs: 30_000 });
    expect(run.code).toBe(74);
    const fatal = fatalLine(run.stdout)!;
    expect(fatal).toMatchObject({ code: "JOURNAL_MISSING", init: `fencegate journal init --config ${config}` });
    expect(fs.existsSync(journalDir)).toBe(false);
  });

  it("is created by `fencegate journal init`, once: a second init changes nothing", async () => {
    const dir = newDir();
    const file = path.join(dir, "journal.db");
    const config = writeUnconnectedConfig(path.join(dir, "gateway.yaml"), file);
    const first = await runFencegate(["journal", "init", "--config", config], { timeoutMs: 30_000 });
    expect(first).toMatchObject({ code: 0, stdout: expect.stringContaining(`${file}: a new journal`) });
    const j = openSqliteJournal({ path: file, recentLimit: 8, createIfMissing: false });
    j.load();
    j.commit([{ actuator: "valve-1", record: { type: "granted", holder: "ctl", token: 7 } }]);
    j.close();
    const second = await runFencegate(["journal", "init", "--config", config], { timeoutMs: 30_000 });
    expect(second).toMatchObject({ code: 0, stdout: expect.stringContaining("already exists: nothing changed") });
    const again = openSqliteJournal({ path: file, recentLimit: 8, createIfMissing: false });
    expect(again.load().get("valve-1")?.highestGranted).toBe(7);
    again.close();
  });

  it("is not created by `fencegate journal init` in a directory that is gone", async () => {
    const dir = newDir();
    const config = writeUnconnectedConfig(path.join(dir, "gateway.yaml"), path.join(dir, "usb", "journal.db"));
    const run = await runFencegate(["journal", "init", "--config", config], { timeoutMs: 30_000 });
    expect(run.code).toBe(74);
    expect(run.stderr).toMatch(/usb does not exist/);
    expect(fs.existsSync(path.join(dir, "usb"))).toBe(false);
  });

  it("is created only where the configuration says so: the embedded demo does, a configuration by default does not", () => {
    expect(loadConfigFile(EMBEDDED_CONFIG).journal.createIfMissing).toBe(true);
    const { journal: _, ...withoutJournal } = gatewayConfig({
      brokerUrl: "mqtt://127.0.0.1:1883",
      journalPath: "",
      buses: { s: { type: "tcp", host: "127.0.0.1", port: 1 } },
      actuators: [valve("v", "s", 1)],
    });
    expect(parseConfig(withoutJournal).journal.createIfMissing).toBe(false);
  });
});
