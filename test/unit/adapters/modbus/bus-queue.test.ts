/**
 * The order in which a bus puts waiting transactions on the wire: commands
 * ahead of polls, polls with what commands leave (but never starved), units in turn within
 * a class, bounded queues per unit and class.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BusQueue, COMMANDS_AHEAD_OF_A_POLL, type TransactionClass } from "../../../../src/adapters/modbus/bus-queue.ts";

function queueOf(units: readonly number[], limitPerUnit = 8): BusQueue<string> {
  const q = new BusQueue<string>(limitPerUnit);
  for (const u of units) q.addUnit(u);
  return q;
}

function takeAll(q: BusQueue<string>): string[] {
  const out: string[] = [];
  for (let next = q.next(); next !== undefined; next = q.next()) out.push(next.job);
  return out;
}

describe("bus queue order", () => {
  it("a command goes ahead of the polls of every unit already waiting", () => {
    const q = queueOf([1, 2, 3, 4]);
    for (const u of [1, 2, 3, 4]) q.push(u, "poll", `poll ${u}`);
    q.push(3, "command", "command 3");
    expect(q.next()).toEqual({ unit: 3, kind: "command", job: "command 3" });
    expect(takeAll(q)).toEqual(["poll 1", "poll 2", "poll 3", "poll 4"]);
  });

  it("polls go whenever no command waits", () => {
    const q = queueOf([1, 2]);
    q.push(1, "poll", "poll 1");
    expect(q.next()?.job).toBe("poll 1");
    q.push(2, "command", "command 2");
    q.push(2, "poll", "poll 2");
    expect(takeAll(q)).toEqual(["command 2", "poll 2"]);
  });

  it("within a class the units take turns", () => {
    const q = queueOf([1, 2, 3]);
    for (const job of ["a", "b", "c"]) q.push(1, "command", `1${job}`);
    q.push(2, "command", "2a");
    q.push(3, "command", "3a");
    q.push(3, "command", "3b");
    expect(takeAll(q)).toEqual(["1a", "2a", "3a", "1b", "3b", "1c"]);
  });

  it(`a waiting poll goes after ${COMMANDS_AHEAD_OF_A_POLL} commands in a row, so a line full of commands still reads its devices`, () => {
    const q = queueOf([1, 2], 64);
    q.push(2, "poll", "poll 2");
    for (let i = 0; i < 2 * COMMANDS_AHEAD_OF_A_POLL + 2; i++) q.push(1, "command", `command ${i}`);
    const order = takeAll(q);
    expect(order.indexOf("poll 2")).toBe(COMMANDS_AHEAD_OF_A_POLL);
  });

  it("commands sent while no poll waited do not count against the next poll", () => {
    const q = queueOf([1, 2], 64);
    for (let i = 0; i < 2 * COMMANDS_AHEAD_OF_A_POLL; i++) q.push(1, "command", `early ${i}`);
    expect(takeAll(q)).toHaveLength(2 * COMMANDS_AHEAD_OF_A_POLL);
    q.push(1, "command", "late");
    q.push(2, "poll", "poll 2");
    expect(takeAll(q)).toEqual(["late", "poll 2"]);
  });

  it("bounds each unit's queue of each class on its own: a full poll queue refuses no command", () => {
    const q = queueOf([1], 2);
    expect(q.push(1, "poll", "p1")).toEqual({ queued: true });
    expect(q.push(1, "poll", "p2")).toEqual({ queued: true });
    expect(q.push(1, "poll", "p3")).toEqual({ queued: false, waiting: 2 });
    expect(q.push(1, "command", "c1")).toEqual({ queued: true });
    expect(q.push(1, "command", "c2")).toEqual({ queued: true });
    expect(q.push(1, "command", "c3")).toEqual({ queued: false, waiting: 2 });
  });

  it("drain takes out every waiting transaction of both classes", () => {
    const q = queueOf([1, 2]);
    q.push(1, "poll", "p");
    q.push(2, "command", "c");
    expect(q.drain().sort()).toEqual(["c", "p"]);
    expect(q.next()).toBeUndefined();
  });

  it("property: every transaction goes exactly once; a poll goes ahead of a waiting command only after a full run of commands", () => {
    const op = fc.oneof(
      fc.record({ push: fc.constantFrom<TransactionClass>("command", "poll"), unit: fc.integer({ min: 1, max: 3 }) }),
      fc.constant({ next: true as const }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const q = new BusQueue<{ id: number; kind: TransactionClass }>(4);
        for (const u of [1, 2, 3]) q.addUnit(u);
        const waiting = { command: 0, poll: 0 };
        const queued = new Set<number>();
        const served: number[] = [];
        let commandsWhilePollWaited = 0;
        const serve = () => {
          const pollWaited = waiting.poll > 0;
          const next = q.next();
          if (next === undefined) {
            expect(waiting).toEqual({ command: 0, poll: 0 });
            return false;
          }
          expect(next.kind).toBe(next.job.kind);
          if (next.kind === "poll" && waiting.command > 0) expect(commandsWhilePollWaited).toBe(COMMANDS_AHEAD_OF_A_POLL);
          if (next.kind === "poll") commandsWhilePollWaited = 0;
          else if (pollWaited) commandsWhilePollWaited++;
          waiting[next.kind]--;
          served.push(next.job.id);
          return true;
        };
        ops.forEach((o, id) => {
          if ("next" in o) return void serve();
          if (q.push(o.unit, o.push, { id, kind: o.push }).queued) {
            waiting[o.push]++;
            queued.add(id);
          }
        });
        while (serve());
        expect(served.sort((a, b) => a - b)).toEqual([...queued].sort((a, b) => a - b));
      }),
    );
  });
});
