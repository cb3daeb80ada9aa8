/**
 * The shell's rule for what may be shown (src/shell/actuator-runtime.ts): a grant's reply and the
 * token in the state wait for its commit; a command's reply does not wait for any commit,
 * and its (token, seq) appears in the state only once the device has answered it. Driven
 * in this process over the in-memory journal, with a device whose answers are released by
 * hand.
 */
import { describe, expect, it } from "vitest";
import { MemoryJournal } from "../../../src/adapters/journal/memory.ts";
import type { Outcome } from "../../../src/core/types.ts";
import type { DeviceCommand, DevicePort, OutboundReply, StateView } from "../../../src/shell/ports.ts";
import { startInProcessGateway } from "../../support/in-process-gateway.ts";

const A = "valve-1";
const turn = () => new Promise<void>((r) => setImmediate(r));

class HeldDevice implements DevicePort {
  readonly writes: { cmd: DeviceCommand; answer: (o: Outcome) => void }[] = [];
  write(cmd: DeviceCommand): Promise<Outcome> {
    return new Promise((answer) => this.writes.push({ cmd, answer }));
  }
  read() {
    return Promise.resolve({ position: 0 });
  }
  readFence() {
    return Promise.resolve(null);
  }
}

function setup(queueLimit = 10_000, ids: readonly string[] = [A]) {
  const journal = new MemoryJournal({ recentLimit: 8 });
  const snapshots = journal.load();
  const devices = new Map(ids.map((id) => [id, new HeldDevice()]));
  const device = devices.get(A)!;
  const replies = new Map<number, OutboundReply>();
  const states: StateView[] = [];
  const nowMs = 0;
  const gateway = startInProcessGateway({
    journal,
    snapshots,
    devices,
    clock: { monotonicMs: () => nowMs, wallNow: () => new Date(nowMs) },
    scheduler: {
      at: (atMs, fn) => {
        const timer = setTimeout(fn, atMs - nowMs);
        return () => clearTimeout(timer);
      },
      defer: (fn) => void setImmediate(fn),
    },
    // A lag no test reaches: the command's records wait until the drain commits them.
    audit: { lagMs: 60_000, lagRecords: 1_000, queueLimit, stallMs: 120_000 },
    outbox: { reply: (ref, reply) => replies.set(ref, reply), event: () => {}, state: (view) => states.push(view) },
  });
  return { journal, device, devices, replies, states, gateway };
}

describe("what the shell shows, and when", () => {
  it("a grant is replied after its commit; a command is replied with no commit at all, its (token, seq) shown once the device answered", async () => {
    const { journal, device, replies, states, gateway } = setup();
    await turn();
    gateway.submit(A, 1, { verb: "lease/acquire", holder: "line-a", ttlMs: 30_000 });
    expect(replies.has(1)).toBe(false); // its commit has not run yet
    await turn();
    await turn();
    expect(journal.commitCount).toBe(1);
    expect(replies.get(1)).toMatchObject({ ok: true, lease: { holder: "line-a", token: 1 } });

    gateway.submit(A, 2, { verb: "command", holder: "line-a", token: 1, seq: 5, set: { position: 40 } });
    await turn();
    expect(device.writes.map((w) => w.cmd)).toMatchObject([{ token: 1, seq: 5 }]); // written with no commit before it
    expect(gateway.view(A)!.fence).toEqual({ token: 1, seq: null }); // at the device, not answered: not shown
    expect(states.at(-1)!.fence).toEqual({ token: 1, seq: null });

    device.writes[0]!.answer({ kind: "applied", applied: { position: 40 } });
    await turn();
    await turn();
    expect(replies.get(2)).toMatchObject({ ok: true, outcome: "applied", token: 1, seq: 5 });
    expect(gateway.view(A)!.fence).toEqual({ token: 1, seq: 5 });
    expect(states.at(-1)!.fence).toEqual({ token: 1, seq: 5 });
    expect(journal.commitCount).toBe(1); // the command's intent and outcome still wait for their lag
    expect(gateway.committer.backlog().records).toBe(2);

    // The next command at the device shows the fence of the one before it, answered.
    gateway.submit(A, 3, { verb: "command", holder: "line-a", token: 1, seq: 6, set: { position: 41 } });
    await turn();
    expect(gateway.view(A)!.fence).toEqual({ token: 1, seq: 5 });
    device.writes[1]!.answer({ kind: "applied", applied: { position: 41 } });
    await gateway.drain(1_000); // a clean stop commits the trail
    expect(journal.commitCount).toBe(2);
    expect(
      journal
        .crash()
        .load()
        .get(A)!
        .recent.map((r) => [r.seq, r.outcome?.kind]),
    ).toEqual([
      [5, "applied"],
      [6, "applied"],
    ]);
  });

  it("refuses a command with OVERLOADED, untouched, once the records not yet durable reach auditQueueLimit", async () => {
    const { device, replies, gateway } = setup(3);
    await turn();
    gateway.submit(A, 1, { verb: "lease/acquire", holder: "line-a", ttlMs: 30_000 });
    await turn();
    await turn();
    gateway.submit(A, 2, { verb: "command", holder: "line-a", token: 1, seq: 1, set: { position: 1 } });
    await turn();
    device.writes[0]!.answer({ kind: "applied", applied: { position: 1 } });
    await turn();
    gateway.submit(A, 3, { verb: "command", holder: "line-a", token: 1, seq: 2, set: { position: 2 } });
    await turn();
    expect(gateway.committer.backlog().records).toBe(3); // two of the first command, the intent of the second
    gateway.submit(A, 4, { verb: "command", holder: "line-a", token: 1, seq: 3, set: { position: 3 } });
    await turn(); // the refusal is the core's: it comes out of the actuator's step
    expect(replies.get(4)).toMatchObject({
      ok: false,
      error: { code: "OVERLOADED", message: expect.stringMatching(/journal is 3 records behind/) },
    });
    expect(device.writes).toHaveLength(2);
  });

  it("with two actuators, the one whose records fill its share of auditQueueLimit is refused OVERLOADED, and the other's commands go on", async () => {
    const B = "valve-2";
    const { devices, replies, gateway } = setup(8, [A, B]); // a share of 4 records each
    await turn();
    gateway.submit(A, 1, { verb: "lease/acquire", holder: "line-a", ttlMs: 30_000 });
    gateway.submit(B, 2, { verb: "lease/acquire", holder: "line-b", ttlMs: 30_000 });
    await turn();
    await turn();
    expect(gateway.committer.backlog().records).toBe(0); // the grants are durable
    // valve-1's controller floods: two commands answered, four records (intent, outcome) waiting.
    for (const [ref, seq] of [
      [3, 1],
      [4, 2],
    ] as const) {
      gateway.submit(A, ref, { verb: "command", holder: "line-a", token: 1, seq, set: { position: seq } });
      await turn();
      devices
        .get(A)!
        .writes.at(-1)!
        .answer({ kind: "applied", applied: { position: seq } });
      await turn();
    }
    expect(gateway.committer.backlogOf(A)).toBe(4);
    gateway.submit(A, 5, { verb: "command", holder: "line-a", token: 1, seq: 3, set: { position: 3 } });
    await turn();
    expect(replies.get(5)).toMatchObject({
      ok: false,
      error: {
        code: "OVERLOADED",
        message:
          "The journal is 4 records behind (4 of them this actuator's, its share) (the disk is slower than the commands); the command was not sent. Retry shortly.",
      },
    });
    expect(devices.get(A)!.writes).toHaveLength(2);
    // valve-2 is not held back by valve-1's flood.
    gateway.submit(B, 6, { verb: "command", holder: "line-b", token: 1, seq: 1, set: { position: 7 } });
    await turn();
    devices.get(B)!.writes[0]!.answer({ kind: "applied", applied: { position: 7 } });
    await turn();
    expect(replies.get(6)).toMatchObject({ ok: true, outcome: "applied" });
    expect(gateway.committer.saturation()).toMatch(
      /^the journal is 6 records behind: valve-1 holds its share of journal\.auditQueueLimit \(4 records each\)/,
    );
  });
});
