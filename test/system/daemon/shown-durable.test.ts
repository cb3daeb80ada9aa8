/**
 * Published state and `read` replies ran ahead of the
 * journal. With every fdatasync held back 1.5 s (bench/slow-disk.mjs in the real daemon),
 * a grant's record is on its way to the disk for that long; meanwhile a `read` reply and the
 * states a poll publishes must not show the new lease or token, because a crash in that
 * window leaves them naming a token that will be granted to someone else.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestController } from "../../support/controller.ts";
import { valve } from "../../support/daemon.ts";
import { Teardown, startStack, type Stack } from "../../support/stack.ts";
import { TopicWatcher, safeJson } from "../../support/watch.ts";

const A = "valve-1";
const STATE = `fencegate/${A}/state`;
const SYNC_MS = 1500;
const SLOW_DISK = `${pathToFileURL(resolve(import.meta.dirname, "../../../bench/slow-disk.mjs")).href}?syncMs=${SYNC_MS}`;

const teardown = new Teardown();
let stack: Stack;
let ctl: TestController;
let watcher: TopicWatcher;

beforeAll(async () => {
  stack = await startStack(teardown, {
    name: "shown",
    gateway: (sim) => ({ buses: { sim: { type: "tcp", ...sim } }, actuators: [valve(A, "sim", 1)] }),
    fenced: [A],
    nodeArgs: ["--import", SLOW_DISK],
  });
  ctl = teardown.add(await TestController.connect(stack.broker.url, "line-a"), (c) => c.close());
  watcher = teardown.add(await TopicWatcher.connect(stack.broker.url, [STATE]), (w) => w.close());
});
afterAll(() => teardown.run());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("nothing published or replied shows a decision before it is durable", () => {
  it("while a grant's commit is held back, a read reply and the polled state show no lease and the old fence", async () => {
    const from = watcher.mark();
    const granting = ctl.acquire(A, 30_000).then((reply) => ({ reply, at: watcher.mark() }));
    await sleep(300); // the grant is decided, its record not yet durable; polls run every 200 ms
    const read = await ctl.read(A);
    expect(read.ok).toBe(true);
    expect(read.state.lease).toBeNull();
    expect(read.state.fence).toEqual({ token: 0, seq: null });
    const { reply, at } = await granting;
    expect(reply).toMatchObject({ ok: true, lease: { holder: "line-a", token: 1 } });
    const shownEarly = watcher.messages
      .slice(from, at)
      .filter((m) => m.topic === STATE)
      .map((m) => safeJson(m.payload)!);
    for (const s of shownEarly)
      expect(s, "a state published before the grant was durable").toMatchObject({ lease: null, fence: { token: 0 } });
    // Once durable, both show it.
    expect((await ctl.read(A)).state.lease).toMatchObject({ holder: "line-a", token: 1 });
    await watcher.waitForJson(STATE, (s) => s.lease?.token === 1, { from: at, what: "the state with the lease" });
  });
});
