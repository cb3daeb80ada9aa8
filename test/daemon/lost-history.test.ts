/**
 * Finding 3 of the adversarial review: a vanished -wal silently re-issued tokens. Real
 * daemon, real Mosquitto, the simulated *plain* valve (no fence of its own to save it),
 * the real journal on disk: five grants, SIGKILL, `journal.db-wal` deleted, restart. The
 * daemon must refuse (exit 74, a sentence naming what is lost and the command to run);
 * `fencegate journal recover` then sets the floor, and the next grant is above every earlier one.
 */
import { spawnSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../support/controller.ts";
import { DaemonProcess, FENCEGATE_BIN, valve } from "../support/daemon.ts";
import { Teardown, startStack, stopDaemon, type Stack } from "../support/stack.ts";

const A = "damper-1";
const teardown = new Teardown();
let stack: Stack;
let daemon: DaemonProcess;
let ctl: TestController;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "lost",
    sim: () => ({ units: [1], rate: 0, profile: "plain" }),
    gateway: (at) => ({ buses: { sim: { type: "tcp", ...at } }, actuators: [valve(A, "sim", 1, "plain")] }),
    fenced: [],
  });
  daemon = stack.daemon;
  ctl = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  teardown.add(null, () => stopDaemon(daemon)); // the last one started
});
afterAll(() => teardown.run());

describe("finding 3: a journal that lost committed history is refused, and recovered above every token", () => {
  it("five grants, SIGKILL, the -wal deleted: exit 74 with a sentence; journal recover; the next grant is above all five", async () => {
    const tokens: number[] = [];
    for (let i = 0; i < 5; i++) {
      const grant = await ctl.acquire(A, 60_000);
      expect(grant.ok, JSON.stringify(grant)).toBe(true);
      tokens.push(grant.lease.token);
      expect(await ctl.request(A, "lease/release", { holder: "line-a", token: grant.lease.token })).toMatchObject({ ok: true });
    }
    expect(tokens).toEqual([1, 2, 3, 4, 5]);
    await daemon.kill("SIGKILL");
    const journal = join(stack.dir, "journal.db");
    expect(existsSync(`${journal}-wal`)).toBe(true);
    rmSync(`${journal}-wal`);

    // Twice: a refusal must not make the next start quiet.
    const config = join(stack.dir, "gateway.yaml");
    for (let attempt = 0; attempt < 2; attempt++) {
      daemon = DaemonProcess.start(stack.dir, stack.config);
      expect(await daemon.exited).toEqual({ code: 74, signal: null });
      const fatal = daemon.logs.find((l) => l.level === 60);
      expect(fatal, JSON.stringify(daemon.logs.slice(-3))).toMatchObject({ code: "JOURNAL_LOST_HISTORY", recover: `fencegate journal recover --config ${config}` });
      expect(fatal!.msg).toMatch(/journal\.db-wal is missing, but .*journal\.db-mark says the journal was open when the gateway last stopped/);
      expect(fatal!.msg).toMatch(/run `fencegate journal recover` with this gateway's --config/);
    }

    const recover = spawnSync(process.execPath, [FENCEGATE_BIN, "journal", "recover", "--config", config], { encoding: "utf8", timeout: 60_000 });
    expect(recover.stderr).toBe("");
    expect(recover.status).toBe(0);
    expect(recover.stdout).toMatch(new RegExp(`${A}: the next token is above \\d+ \\(the journal had \\d+\\)`));

    daemon = DaemonProcess.start(stack.dir, stack.config);
    await daemon.ready([]);
    const next = await ctl.acquire(A, 60_000);
    expect(next.ok, JSON.stringify(next)).toBe(true);
    for (const t of tokens) expect(next.lease.token).toBeGreaterThan(t);
  });
});
