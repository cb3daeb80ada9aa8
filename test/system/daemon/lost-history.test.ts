/**
 * A vanished -wal silently re-issued tokens. Real
 * daemon, real Mosquitto, the simulated *plain* valve (no fence of its own to save it),
 * the real journal on disk: five grants, SIGKILL, `journal.db-wal` deleted, restart. The
 * daemon must refuse (exit 74, a sentence naming what is lost and the command to run);
 * `fencegate journal recover` then sets the floor, and the next grant is above every earlier one.
 */
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DaemonProcess } from "../../support/daemon.ts";
import { runFencegateSync } from "../../support/processes.ts";
import { Teardown, startValveStack, type ValveStack } from "../../support/stack.ts";

const A = "damper-1";
const teardown = new Teardown();
let world: ValveStack;

beforeAll(async () => {
  world = await startValveStack(teardown, { name: "lost", id: A, profile: "plain" });
});
afterAll(() => teardown.run());

describe("a journal that lost committed history is refused, and recovered above every token", () => {
  it("five grants, SIGKILL, the -wal deleted: exit 74 with a sentence; journal recover; the next grant is above all five", async () => {
    const tokens: number[] = [];
    for (let i = 0; i < 5; i++) {
      const grant = await world.ctl.acquire(A, 60_000);
      expect(grant.ok, JSON.stringify(grant)).toBe(true);
      tokens.push(grant.lease.token);
      expect(await world.ctl.request(A, "lease/release", { holder: "line-a", token: grant.lease.token })).toMatchObject({ ok: true });
    }
    expect(tokens).toEqual([1, 2, 3, 4, 5]);
    await world.daemon.kill("SIGKILL");
    const journal = join(world.dir, "journal.db");
    expect(existsSync(`${journal}-wal`)).toBe(true);
    rmSync(`${journal}-wal`);

    // Twice: a refusal must not make the next start quiet.
    const config = join(world.dir, "gateway.yaml");
    for (let attempt = 0; attempt < 2; attempt++) {
      world.daemon = DaemonProcess.start(world.dir, world.config);
      expect(await world.daemon.exited).toEqual({ code: 74, signal: null });
      const fatal = world.daemon.logs.find((l) => l.level === 60);
      expect(fatal, JSON.stringify(world.daemon.logs.slice(-3))).toMatchObject({
        code: "JOURNAL_LOST_HISTORY",
        recover: `fencegate journal recover --config ${config}`,
      });
      expect(fatal!.msg).toMatch(
        /journal\.db-wal is missing, but .*journal\.db-mark says the journal was open when the gateway last stopped/,
      );
      expect(fatal!.msg).toMatch(/run `fencegate journal recover` with this gateway's --config/);
    }

    const recover = runFencegateSync(["journal", "recover", "--config", config], { timeoutMs: 60_000 });
    expect(recover.stderr).toBe("");
    expect(recover.code).toBe(0);
    expect(recover.stdout).toMatch(new RegExp(`${A}: the next token is above \\d+ \\(the journal had \\d+\\)`));

    world.daemon = DaemonProcess.start(world.dir, world.config);
    await world.daemon.ready([]);
    const next = await world.ctl.acquire(A, 60_000);
    expect(next.ok, JSON.stringify(next)).toBe(true);
    for (const t of tokens) expect(next.lease.token).toBeGreaterThan(t);
  });
});
