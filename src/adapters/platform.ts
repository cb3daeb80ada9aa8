/**
 * The platform's clock, timers and random bytes, behind the shell's ports (src/shell/ports.ts):
 * what the daemon hands the shell, where the simulator hands it seeded ones.
 */
import { randomBytes } from "node:crypto";
import type { Clock, Random, Scheduler } from "../shell/ports.ts";

export const realClock: Clock = {
  // Whole milliseconds: every time the core sees, and every expiresInMs it reports, is an integer.
  monotonicMs: () => Math.floor(performance.now()),
  wallNow: () => new Date(),
};

export const realScheduler: Scheduler = {
  at(atMs, fn) {
    const timer = setTimeout(fn, Math.max(0, atMs - performance.now()));
    return () => clearTimeout(timer);
  },
  defer: (fn) => setImmediate(fn),
};

export const platformRandom: Random = { bytes: (n) => randomBytes(n) };
