/**
 * Who publishes what the gateway says. Replies always go (a standby's refusal is an answer
 * too). In a gateway group only the serving gateway publishes states and events: a standby's
 * (or a deposed gateway's) view must not overwrite the active one's retained state. Events of
 * the start (leases ended by the restart, the safe writes it owes) happen before the broker is
 * connected: they are held for the first connection, up to a bound. Watchers (the metrics,
 * the status page) see every event and every view, serving or not.
 */
import type { OutboundReply, Outbox, StateView } from "./ports.ts";

type OutboxEvent = Parameters<Outbox["event"]>[1];

/** Where published messages go: the MQTT link. */
export interface Publisher {
  reply(ref: number, reply: OutboundReply): void;
  event(actuator: string, event: OutboxEvent): void;
  state(view: StateView): void;
}

export interface OutboxWatcher {
  event?(actuator: string, event: OutboxEvent): void;
  /** Every view the gateway could have published (see Outbox.observe). */
  view?(view: StateView): void;
}

/** Events kept for the first connection (a start with the broker down keeps the first ones). */
export const EVENTS_BEFORE_CONNECT_LIMIT = 1024;

export class PublishingOutbox implements Outbox {
  private held: [string, OutboxEvent][] | null = [];
  private readonly watchers: OutboxWatcher[] = [];

  constructor(
    private readonly to: Publisher,
    private readonly serving: () => boolean,
  ) {}

  watch(watcher: OutboxWatcher): void {
    this.watchers.push(watcher);
  }

  reply(ref: number, reply: OutboundReply): void {
    this.to.reply(ref, reply);
  }

  event(actuator: string, event: OutboxEvent): void {
    for (const w of this.watchers) w.event?.(actuator, event);
    if (!this.serving()) return;
    if (this.held === null) this.to.event(actuator, event);
    else if (this.held.length < EVENTS_BEFORE_CONNECT_LIMIT) this.held.push([actuator, event]);
  }

  state(view: StateView): void {
    if (this.serving()) this.to.state(view);
  }

  observe(view: StateView): void {
    for (const w of this.watchers) w.view?.(view);
  }

  /** The first connection is up: the held events go out in order, and every later one at once. */
  connected(): void {
    const held = this.held ?? [];
    this.held = null;
    for (const [actuator, event] of held) this.to.event(actuator, event);
  }
}
