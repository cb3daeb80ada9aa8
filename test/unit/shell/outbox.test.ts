/**
 * Who publishes what (src/shell/outbox.ts): replies always; states and events only while
 * serving; the start's events held for the first connection, at most a bound of them, in
 * order; watchers see everything.
 */
import { describe, expect, it } from "vitest";
import { EVENTS_BEFORE_CONNECT_LIMIT, PublishingOutbox, type Publisher } from "../../../src/shell/outbox.ts";
import type { OutboundReply, StateView } from "../../../src/shell/ports.ts";

type Event = Parameters<Publisher["event"]>[1];
const event = (token: number): Event => ({ type: "expired", holder: "line-a", token, at: new Date(0) }) as unknown as Event;
const view = { actuator: "valve-1" } as unknown as StateView;
const reply = { ok: true } as unknown as OutboundReply;

function setup(serving = true) {
  const published: string[] = [];
  const publisher: Publisher = {
    reply: (ref) => published.push(`reply ${ref}`),
    event: (actuator, e) => published.push(`event ${actuator} ${(e as { token: number }).token}`),
    state: (v) => published.push(`state ${v.actuator}`),
  };
  const state = { serving };
  const outbox = new PublishingOutbox(publisher, () => state.serving);
  const watched: string[] = [];
  outbox.watch({ event: (actuator) => watched.push(`event ${actuator}`), view: (v) => watched.push(`view ${v.actuator}`) });
  return { outbox, published, watched, state };
}

describe("the publishing outbox", () => {
  it("holds the start's events until the first connection, then sends them in order and later ones at once", () => {
    const { outbox, published } = setup();
    outbox.event("valve-1", event(1));
    outbox.event("valve-2", event(2));
    expect(published).toEqual([]);
    outbox.connected();
    outbox.event("valve-1", event(3));
    expect(published).toEqual(["event valve-1 1", "event valve-2 2", "event valve-1 3"]);
  });

  it("keeps at most its bound of events before the first connection: the first ones", () => {
    const { outbox, published } = setup();
    for (let token = 1; token <= EVENTS_BEFORE_CONNECT_LIMIT + 1; token++) outbox.event("valve-1", event(token));
    outbox.connected();
    expect(published).toHaveLength(EVENTS_BEFORE_CONNECT_LIMIT);
    expect(published.at(-1)).toBe(`event valve-1 ${EVENTS_BEFORE_CONNECT_LIMIT}`);
  });

  it("publishes no state or event while not serving (a standby), but every reply, and its watchers see everything", () => {
    const { outbox, published, watched, state } = setup(false);
    outbox.connected();
    outbox.event("valve-1", event(1));
    outbox.state(view);
    outbox.observe(view);
    outbox.reply(7, reply);
    expect(published).toEqual(["reply 7"]);
    expect(watched).toEqual(["event valve-1", "view valve-1"]);
    state.serving = true;
    outbox.state(view);
    expect(published).toEqual(["reply 7", "state valve-1"]);
  });
});
