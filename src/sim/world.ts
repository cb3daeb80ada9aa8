/**
 * Simulated time: a discrete-event queue, and the Clock and Scheduler ports over it.
 *
 * Events run one at a time in (time, insertion) order. After each event the loop lets the
 * microtask queue drain completely (the shell's promise chains: group commit, effects in
 * order) before the next event, so an event's consequences that take no simulated time
 * are all done before time moves. Nothing here reads a real clock or a real timer's order.
 */
import type { Clock, Scheduler } from "../shell/ports.ts";

interface SimEvent {
  readonly atMs: number;
  readonly order: number;
  readonly fn: () => void;
  cancelled: boolean;
}

/** Wall time is only for humans; a fixed origin keeps published states identical per seed. */
const WALL_ORIGIN_MS = Date.UTC(2026, 0, 1);

/** Lets every queued microtask (and the ones they queue) run: setImmediate comes after them all. */
const drainMicrotasks = () => new Promise<void>((resolve) => setImmediate(resolve));

export class World {
  nowMs = 0;
  private heap: SimEvent[] = [];
  private order = 0;
  eventsRun = 0;

  constructor(readonly maxEvents: number) {}

  readonly clock: Clock = {
    monotonicMs: () => this.nowMs,
    wallNow: () => new Date(WALL_ORIGIN_MS + this.nowMs),
  };

  /** Runs `fn` at `atMs` (never in the past). Returns a cancel function. */
  at(atMs: number, fn: () => void): () => void {
    const ev: SimEvent = { atMs: Math.max(atMs, this.nowMs), order: this.order++, fn, cancelled: false };
    this.push(ev);
    return () => {
      ev.cancelled = true;
    };
  }

  after(delayMs: number, fn: () => void): () => void {
    return this.at(this.nowMs + delayMs, fn);
  }

  /**
   * The Scheduler port for one gateway process. Each timer, when it fires, goes through
   * `enter`: a crashed process's timers and deferred flushes never run, a paused one's wait.
   */
  schedulerFor(enter: (fn: () => void) => void): Scheduler {
    return {
      at: (atMs, fn) => this.at(atMs, () => enter(fn)),
      // After the current event: the same instant, behind everything already due now.
      defer: (fn) => void this.at(this.nowMs, () => enter(fn)),
    };
  }

  /** Runs events until none is due at or before `untilMs`. */
  async run(untilMs: number): Promise<void> {
    await drainMicrotasks();
    for (;;) {
      const next = this.heap[0];
      if (next === undefined || next.atMs > untilMs) break;
      this.pop();
      if (next.cancelled) continue;
      if (++this.eventsRun > this.maxEvents) throw new Error(`simulation exceeded ${this.maxEvents} events: a livelock or a runaway timer`);
      this.nowMs = next.atMs;
      next.fn();
      await drainMicrotasks();
    }
    this.nowMs = Math.max(this.nowMs, untilMs);
  }

  private less(a: SimEvent, b: SimEvent): boolean {
    return a.atMs !== b.atMs ? a.atMs < b.atMs : a.order < b.order;
  }

  private push(ev: SimEvent): void {
    const h = this.heap;
    h.push(ev);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  private pop(): void {
    const h = this.heap;
    const last = h.pop()!;
    if (h.length === 0) return;
    h[0] = last;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < h.length && this.less(h[l]!, h[m]!)) m = l;
      if (r < h.length && this.less(h[r]!, h[m]!)) m = r;
      if (m === i) break;
      [h[i], h[m]] = [h[m]!, h[i]!];
      i = m;
    }
  }
}
