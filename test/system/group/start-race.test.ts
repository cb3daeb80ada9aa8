/**
 * Both gateways of a group started at the same moment, again and again: exactly one becomes
 * active every time, and the other stands by behind it. Each round stops both with SIGTERM
 * (the active one gives its lease up, so the next round starts from a free leader key).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GATEWAYS, isServing, startGroup, type GroupStack } from "../../support/group.ts";
import { Teardown, daemonReport, stopDaemon } from "../../support/stack.ts";

const ROUNDS = Number(process.env.FENCEGATE_RACE_ROUNDS ?? 20);
const teardown = new Teardown();
let group: GroupStack;

beforeAll(async () => {
  group = await startGroup(teardown, { name: "race", leaseTtlMs: 2000 });
});

afterAll(() => teardown.run());

const standingBy = (l: { msg?: string }) => l.msg === "the group's leader key is held by another gateway; standing by";
const tookOver = (l: { msg?: string }) => l.msg === "this gateway holds the group's leader key; taking over";

describe("gateways started at once", () => {
  it(`exactly one becomes active, every time (${ROUNDS} rounds)`, async () => {
    const winners: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const daemons = GATEWAYS.map((_, i) => group.start(i));
      const winner = await Promise.race(daemons.map((d, i) => d.waitForLog(isServing, 20_000, "serving").then(() => i)));
      const loser = daemons[1 - winner]!;
      await loser.waitForLog(standingBy, 10_000, "standing by");
      // A second take-over would come within a look or two of the loser's; wait for a few.
      await new Promise((r) => setTimeout(r, 500));
      const report = daemons.map((d) => daemonReport(d, 10)).join("\n\n");
      expect(
        daemons.map((d) => d.logs.filter(tookOver).length),
        report,
      ).toEqual(daemons.map((_, i) => (i === winner ? 1 : 0)));
      winners.push(GATEWAYS[winner]!);
      await Promise.all(daemons.map((d) => stopDaemon(d)));
    }
    console.info(`winners: ${winners.join(" ")}`);
  }, 300_000);
});
