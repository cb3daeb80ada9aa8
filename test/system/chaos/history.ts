/**
 * What a chaos run records, and the safety checker that judges it. Pure: the harness
 * gathers the histories (controllers' logs, the device's own applied log from every
 * simulator life, the daemon's "journal loaded" and "granted" lines of every life) and
 * this decides, with no access to anything live.
 *
 * Every time is CLOCK_MONOTONIC in ms (see {@link monoMs}), comparable across processes.
 */

/** The position the k-th command of a lease sets: distinct for k < 10000 (0.01 % steps). */
export function positionFor(k: number): number {
  return (k % 10_000) / 100;
}

/** CLOCK_MONOTONIC in ms (Node's hrtime is uv_hrtime: the same clock in every process). */
export function monoMs(): number {
  return Number(process.hrtime.bigint() / 1000n) / 1000;
}

/** One line of a controller's log (test/system/chaos/controller.ts). */
export type ControllerEntry = { mono: number; holder: string } & (
  | { ev: "start"; pid: number }
  | { ev: "granted"; token: number; sentMono: number }
  | { ev: "acquire-refused"; code: string }
  | { ev: "sent"; token: number; seq: number; position: number }
  | { ev: "applied"; token: number; seq: number; position: number; applied: number | undefined }
  | { ev: "refused"; token: number; seq: number; position: number; code: string }
  | { ev: "lost"; token: number; reason: string }
  | { ev: "error"; message: string }
  /** The broker refused or was down (it restarts among the faults): retried, not a violation. */
  | { ev: "connect-retry"; message: string }
);

/** One entry of the device's applied log, `mono` = the simulator's `at` moved onto CLOCK_MONOTONIC. */
export interface DeviceEntry {
  readonly token: number;
  readonly seq: number;
  readonly position: number;
  readonly mono: number;
  /** How far off `mono` may be (half the round trip of the clock-offset probe), ms. */
  readonly errMs: number;
  /** Which simulator process recorded it. */
  readonly simLife: number;
}

/** One life of the daemon process. */
export interface DaemonLife {
  /** In a gateway group: which gateway (each has its own journal). */
  readonly gateway?: string;
  readonly startMono: number;
  /** When it was SIGKILLed (null: the last life, still running at the end). */
  readonly killMono: number | null;
  /** Its "journal loaded" line for the actuator (null: a fresh journal, nothing loaded). */
  readonly loaded: { readonly highestGranted: number; readonly fence: { readonly token: number; readonly seq: number | null } } | null;
  /** Its "granted" log lines. */
  readonly granted: readonly { readonly holder: string; readonly token: number }[];
}

export interface History {
  readonly controllers: readonly ControllerEntry[];
  readonly device: readonly DeviceEntry[];
  readonly daemon: readonly DaemonLife[];
}

export interface Verdict {
  readonly violations: string[];
  readonly appliedAtDevice: number;
  readonly appliedReplies: number;
  readonly grants: number;
  /** Refusals (and timeouts) controllers saw, by code: commands and acquires. */
  readonly refusedByCode: Record<string, number>;
}

function fenceLess(a: { token: number; seq: number | null }, b: { token: number; seq: number | null }): boolean {
  if (a.token !== b.token) return a.token < b.token;
  return (a.seq ?? -1) < (b.seq ?? -1);
}

export function check(h: History): Verdict {
  const violations: string[] = [];
  const v = (s: string) => {
    if (violations.length < 200) violations.push(s);
  };
  const entries = [...h.controllers].sort((a, b) => a.mono - b.mono);
  const grants = entries.filter((e): e is Extract<ControllerEntry, { ev: "granted" }> => e.ev === "granted");
  const kills = h.daemon.map((d) => d.killMono).filter((k): k is number => k !== null);

  // 1. The device's own order: tokens never decrease; (token, device seq) strictly increases.
  for (let i = 1; i < h.device.length; i++) {
    const [p, q] = [h.device[i - 1]!, h.device[i]!];
    if (q.token < p.token) v(`device: token went back from ${p.token} to ${q.token} (entry ${i})`);
    else if (q.token === p.token && q.seq <= p.seq)
      v(`device: (token, seq) did not increase: (${p.token}, ${p.seq}) then (${q.token}, ${q.seq}) (entry ${i})`);
  }

  // 2. No token granted to two grants: never to two holders; to the same holder twice only
  //    as the live holder's refresh, never across a daemon restart; never twice in the daemon's log.
  const firstGrant = new Map<number, (typeof grants)[number]>();
  for (const g of grants) {
    const first = firstGrant.get(g.token);
    if (!first) {
      firstGrant.set(g.token, g);
      continue;
    }
    if (first.holder !== g.holder) v(`token ${g.token} granted to ${first.holder} and to ${g.holder}`);
    else if (kills.some((k) => k > first.mono && k < g.sentMono)) v(`token ${g.token} granted to ${g.holder} again after a daemon restart`);
  }
  const daemonGranted = new Map<number, string>();
  for (const [life, d] of h.daemon.entries()) {
    for (const g of d.granted) {
      const seen = daemonGranted.get(g.token);
      if (seen !== undefined) v(`daemon life ${life} granted token ${g.token} to ${g.holder}; already granted to ${seen}`);
      daemonGranted.set(g.token, g.holder);
      const c = firstGrant.get(g.token);
      if (c && c.holder !== g.holder) v(`token ${g.token}: daemon says ${g.holder}, controller ${c.holder} got it`);
    }
  }

  // 3. Every "applied" a controller got is in the device's applied log; it set what was asked.
  const atDevice = new Map<string, DeviceEntry>();
  for (const e of h.device) atDevice.set(`${e.token}/${e.position}`, e);
  const sent = new Set<string>();
  let appliedReplies = 0;
  const refusedByCode: Record<string, number> = {};
  const appliedAs = new Map<string, string>();
  for (const e of entries) {
    if (e.ev === "sent") sent.add(`${e.token}/${e.position}`);
    if (e.ev === "applied") {
      appliedReplies++;
      if (!atDevice.has(`${e.token}/${e.position}`))
        v(`${e.holder} was told (${e.token}, ${e.seq}) position ${e.position} was applied; the device never applied it`);
      if (e.applied !== e.position) v(`${e.holder}: (${e.token}, ${e.seq}) asked for ${e.position}, reply says ${e.applied}`);
      // One (token, seq) names one command: two commands answered as the same one means one
      // of them got the other's outcome, and its own effect was silently lost.
      const key = `${e.token}/${e.seq}`;
      const first = appliedAs.get(key);
      if (first !== undefined && first !== `${e.holder}/${e.position}`)
        v(`(${e.token}, ${e.seq}) reported applied for two commands: ${first} and ${e.holder}/${e.position}`);
      appliedAs.set(key, `${e.holder}/${e.position}`);
    }
    if (e.ev === "refused" || e.ev === "acquire-refused") refusedByCode[e.code] = (refusedByCode[e.code] ?? 0) + 1;
    if (e.ev === "error") v(`${e.holder}: ${e.message}`);
  }

  // 4. Everything the device applied was sent under that token, in the order it was sent.
  const sentAt = new Map<string, number>();
  for (const e of entries) if (e.ev === "sent" && !sentAt.has(`${e.token}/${e.position}`)) sentAt.set(`${e.token}/${e.position}`, e.mono);
  const lastSentAt = new Map<number, number>();
  for (const d of h.device) {
    if (!firstGrant.has(d.token)) v(`device applied token ${d.token}, which no controller was granted`);
    const at = sentAt.get(`${d.token}/${d.position}`);
    if (at === undefined) {
      v(`device applied (${d.token}) position ${d.position}, which nobody sent under that token`);
      continue;
    }
    const prev = lastSentAt.get(d.token);
    if (prev !== undefined && at < prev) v(`device applied token ${d.token}'s position ${d.position} after a command sent later`);
    lastSentAt.set(d.token, at);
  }

  // 5. Nothing applied with a token after a newer token had been granted (the stale write).
  //    The newest grant before each moment, from the controllers' receipts (a grant is made
  //    before its reply arrives, so a receipt time is an upper bound on the grant's time).
  const grantTimes = [...firstGrant.values()].sort((a, b) => a.mono - b.mono);
  for (const d of h.device) {
    const at = d.mono - d.errMs; // the earliest the device can have acted
    const newer = grantTimes.find((g) => g.token > d.token && g.mono < at);
    if (newer)
      v(
        `device applied token ${d.token} at ${d.mono.toFixed(1)} ms; token ${newer.token} had been granted to ${newer.holder} by ${newer.mono.toFixed(1)} ms`,
      );
  }

  // 6. Each gateway's journal never went back across its restarts. A gateway on its own
  //    also held every grant a controller had seen; in a group each journal holds only its
  //    own gateway's grants (the group's floor is etcd and the devices: rules 1, 2 and 5).
  const gateways = new Set(h.daemon.map((d) => d.gateway));
  for (const gateway of gateways) {
    let prevLoaded: DaemonLife["loaded"] = null;
    for (const [life, d] of h.daemon.entries()) {
      if (d.gateway !== gateway) continue;
      const loaded = d.loaded ?? { highestGranted: 0, fence: { token: 0, seq: null } };
      const who = gateway === undefined ? `life ${life}` : `${gateway} (life ${life})`;
      if (prevLoaded) {
        if (loaded.highestGranted < prevLoaded.highestGranted)
          v(`${who}: journal highestGranted ${loaded.highestGranted} < ${prevLoaded.highestGranted} at the previous start`);
        if (fenceLess(loaded.fence, prevLoaded.fence))
          v(`${who}: journal fence ${JSON.stringify(loaded.fence)} < ${JSON.stringify(prevLoaded.fence)} at the previous start`);
      }
      if (gateways.size === 1) {
        const seenBefore = grants.filter((g) => g.mono < d.startMono).reduce((m, g) => Math.max(m, g.token), 0);
        if (loaded.highestGranted < seenBefore)
          v(`${who}: journal loaded highestGranted ${loaded.highestGranted}, but token ${seenBefore} had been granted before`);
        const appliedBefore = h.device.filter((e) => e.mono + e.errMs < d.startMono).reduce((m, e) => Math.max(m, e.token), 0);
        if (loaded.fence.token < appliedBefore && life > 0)
          v(`${who}: journal fence token ${loaded.fence.token} below token ${appliedBefore} already applied at the device`);
      }
      prevLoaded = loaded;
    }
  }

  return { violations, appliedAtDevice: h.device.length, appliedReplies, grants: firstGrant.size, refusedByCode };
}
