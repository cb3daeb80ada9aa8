/**
 * One gateway's part in a gateway group: who may drive the devices, as a pure transition
 * function. The etcd adapter (src/adapters/etcd/member.ts) carries out the effects and feeds
 * the answers back in; time arrives as `nowMs` (monotonic), never read here.
 *
 *   leadershipStep(config, state, input) -> { state, effects }
 *
 * The group's one active gateway holds the leader key in etcd, attached to its etcd lease;
 * etcd deletes the key when the lease expires, and only then can a standby take it (a
 * transaction that creates the key only if it does not exist). The active gateway's safety
 * does not rest on etcd telling it in time that it lost: it fences itself. etcd counts a
 * lease's TTL from when it processes a renewal, which is after the renewal was sent, so the
 * lease cannot expire before `sentAt + ttl` of the last renewal that etcd confirmed. The
 * gateway drives devices only while `now < sentAt + ttl - margin` by its own monotonic
 * clock ({@link mayDriveDevices}); the margin covers clock-rate differences and the frames
 * already on their way when it stops. A standby becomes active only after the key is gone,
 * which is after the old lease expired, which is after the old gateway's window closed.
 */

export interface LeadershipConfig {
  /** The etcd lease TTL asked for (whole seconds, in ms); etcd's answer can only lower what is used. */
  readonly ttlMs: number;
  /** Device I/O stops this long before the lease can have expired. */
  readonly marginMs: number;
  /** Renewal period while renewals succeed (a third of the TTL). */
  readonly renewEveryMs: number;
  /** Delay before asking again after a failed request. */
  readonly retryMs: number;
  /** How often a standby looks at the leader key. */
  readonly lookEveryMs: number;
}

/** The default cadence for a TTL: renew at a third of it, retry and look several times a renewal. */
export function leadershipConfig(ttlMs: number, marginMs: number): LeadershipConfig {
  return {
    ttlMs,
    marginMs,
    renewEveryMs: Math.floor(ttlMs / 3),
    retryMs: Math.max(50, Math.min(250, Math.floor(ttlMs / 10))),
    lookEveryMs: Math.max(50, Math.min(250, Math.floor(ttlMs / 10))),
  };
}

/**
 * How much room the active gateway's window leaves once an etcd leader hangs (a frozen VM,
 * a partition), in ms: negative or 0 means it steps down before etcd has a leader again.
 * After the last confirmed renewal the gateway drives devices for `ttl - margin`; within
 * that, the next renewal is sent a renewal period later, etcd's followers notice the hung
 * leader and elect another within two election timeouts (each waits a randomised one to two
 * before campaigning), and a request that went to the hung leader first costs one request
 * timeout. A new leader gives every lease its full TTL again, so only this window matters.
 * docs/gateway-group.md, "When etcd is in trouble".
 */
export function leaderHangRoomMs(config: LeadershipConfig, requestTimeoutMs: number, electionTimeoutMs: number): number {
  return config.ttlMs - config.marginMs - config.renewEveryMs - (2 * electionTimeoutMs + requestTimeoutMs);
}

/** A leadership term: the leader key's create revision, unique while etcd's history is. */
export interface Term {
  readonly revision: number;
}

export interface HeldLease {
  readonly id: string;
  readonly ttlMs: number;
  /** `sentAt + ttl` of the last grant or renewal etcd confirmed: the lease lives at least until then. */
  readonly validUntilMs: number;
}

export type Phase = "idle" | "standby" | "campaigning" | "active" | "stopped";

export interface LeadershipState {
  /** idle: no lease; standby: a lease, another holds (or nobody yet holds) the key; active: we hold it. */
  readonly phase: Phase;
  readonly lease: HeldLease | null;
  readonly term: Term | null;
  /** Requests in flight: at most one of each kind. */
  readonly pending: { readonly grant: boolean; readonly renew: boolean; readonly look: boolean; readonly campaign: boolean };
  readonly nextGrantAtMs: number;
  readonly nextRenewAtMs: number;
  readonly nextLookAtMs: number;
  /** Whether the last exchange with etcd succeeded: while not, no grant is attempted. */
  readonly etcdReachable: boolean;
  /** Since when etcd has not answered (the start, or the first failed request after an answer); null while it answers. */
  readonly unreachableSinceMs: number | null;
}

export type StepDownReason = "renewal-overdue" | "lease-lost" | "deposed" | "stale" | "shutdown";

/** What happens to a member; the shell adds the time it happened at. */
export type LeadershipEvent =
  | { readonly type: "start" }
  | { readonly type: "tick" }
  | { readonly type: "granted"; readonly id: string; readonly ttlMs: number; readonly sentAtMs: number }
  | { readonly type: "grantFailed" }
  /** `ttlMs` 0: etcd no longer knows the lease. */
  | { readonly type: "renewed"; readonly id: string; readonly ttlMs: number; readonly sentAtMs: number }
  | { readonly type: "renewFailed"; readonly id: string }
  /**
   * The leader key: absent, someone else's, or ours under the lease the look named (a campaign
   * whose answer was lost had won). `configAgrees` false: another member's actuators are
   * configured differently, so this one must not take over (undefined: not asked, agrees).
   */
  | {
      readonly type: "looked";
      readonly leaseId: string;
      readonly leader: "none" | "other" | { readonly mine: Term };
      readonly configAgrees?: boolean;
    }
  | { readonly type: "lookFailed" }
  | { readonly type: "campaigned"; readonly won: Term | null }
  | { readonly type: "campaignFailed" }
  /** A device or etcd showed that another gateway leads now (a newer token, a lost compare). */
  | { readonly type: "stale"; readonly reason: string }
  | { readonly type: "stop" };

export type LeadershipInput = LeadershipEvent & { readonly nowMs: number };

export type LeadershipEffect =
  | { readonly kind: "grant"; readonly ttlMs: number }
  | { readonly kind: "renew"; readonly id: string }
  /** Read the leader key; it is "mine" only if held under this lease (a key left on a given-up lease is not). */
  | { readonly kind: "look"; readonly leaseId: string }
  | { readonly kind: "campaign"; readonly leaseId: string }
  /** Device I/O must stop now, before anything else; leases end. */
  | { readonly kind: "deactivate"; readonly reason: StepDownReason; readonly detail: string }
  /** Take over: raise the device fences, then serve. */
  | { readonly kind: "activate"; readonly term: Term }
  /** Give the lease up (best effort): the leader key goes with it, so a standby need not wait for the TTL. */
  | { readonly kind: "revoke"; readonly id: string };

export interface LeadershipStep {
  readonly state: LeadershipState;
  readonly effects: readonly LeadershipEffect[];
}

export const INITIAL_LEADERSHIP: LeadershipState = {
  phase: "idle",
  lease: null,
  term: null,
  pending: { grant: false, renew: false, look: false, campaign: false },
  nextGrantAtMs: 0,
  nextRenewAtMs: 0,
  nextLookAtMs: 0,
  etcdReachable: false,
  unreachableSinceMs: null,
};

/** Whether this gateway may send anything to a device at `nowMs`. Checked before every frame. */
export function mayDriveDevices(config: LeadershipConfig, state: LeadershipState, nowMs: number): boolean {
  return state.phase === "active" && state.lease !== null && nowMs < state.lease.validUntilMs - config.marginMs;
}

/** Whether a grant may be tried now: active, and etcd answered the last time it was asked. */
export function mayGrant(config: LeadershipConfig, state: LeadershipState, nowMs: number): boolean {
  return mayDriveDevices(config, state, nowMs) && state.etcdReachable;
}

/**
 * Whether this member has not reached etcd for longer than a lease TTL. Past that, whatever
 * lease it held has expired, it cannot take over, and it knows nothing of the other members:
 * for all it can tell, nothing of the group serves (docs/gateway-group.md, "When etcd is in
 * trouble"). /healthz answers 503 then; a shorter gap is the routine retry.
 */
export function etcdOutOfReach(config: LeadershipConfig, state: LeadershipState, nowMs: number): boolean {
  return state.phase !== "stopped" && state.unreachableSinceMs !== null && nowMs - state.unreachableSinceMs > config.ttlMs;
}

/** When the adapter must next feed a `tick`, or null when nothing is due. */
export function leadershipWakeMs(config: LeadershipConfig, state: LeadershipState): number | null {
  if (state.phase === "stopped") return null;
  let wake = Number.POSITIVE_INFINITY;
  if (state.phase === "active" && state.lease) wake = Math.min(wake, state.lease.validUntilMs - config.marginMs);
  if (state.lease && !state.pending.renew) wake = Math.min(wake, state.nextRenewAtMs);
  if ((state.phase === "standby" || state.phase === "active") && !state.pending.look) wake = Math.min(wake, state.nextLookAtMs);
  if (state.phase === "idle" && !state.pending.grant) wake = Math.min(wake, state.nextGrantAtMs);
  return Number.isFinite(wake) ? wake : null;
}

class Step {
  readonly effects: LeadershipEffect[] = [];
  constructor(
    readonly config: LeadershipConfig,
    public state: LeadershipState,
    readonly nowMs: number,
  ) {}
  set(patch: Partial<LeadershipState>): void {
    this.state = { ...this.state, ...patch };
  }
  /** An exchange with etcd ended: answered, or failed (no answer in time, refused connection). */
  reached(answered: boolean): void {
    if (answered) this.set({ etcdReachable: true, unreachableSinceMs: null });
    else this.set({ etcdReachable: false, unreachableSinceMs: this.state.unreachableSinceMs ?? this.nowMs });
  }
  pending(patch: Partial<LeadershipState["pending"]>): void {
    this.state = { ...this.state, pending: { ...this.state.pending, ...patch } };
  }
  emit(effect: LeadershipEffect): void {
    this.effects.push(effect);
  }
}

export function leadershipStep(config: LeadershipConfig, state: LeadershipState, input: LeadershipInput): LeadershipStep {
  const s = new Step(config, state, input.nowMs);
  if (s.state.phase === "stopped") return { state: s.state, effects: [] };
  // First, always: a gateway whose window has closed stops driving devices before anything
  // else happens, whatever the input (a paused process wakes up with old answers queued).
  fenceIfDue(s);
  switch (input.type) {
    case "start":
      s.set({ unreachableSinceMs: s.nowMs }); // not reached yet
      break;
    case "tick":
      break;
    case "granted":
      granted(s, input.id, input.ttlMs, input.sentAtMs);
      break;
    case "grantFailed":
      s.pending({ grant: false });
      s.set({ nextGrantAtMs: s.nowMs + config.retryMs });
      s.reached(false);
      break;
    case "renewed":
      renewed(s, input.id, input.ttlMs, input.sentAtMs);
      break;
    case "renewFailed":
      if (s.state.lease?.id === input.id) {
        s.pending({ renew: false });
        s.set({ nextRenewAtMs: s.nowMs + config.retryMs });
        s.reached(false);
      }
      break;
    case "looked":
      looked(s, input.leaseId, input.leader, input.configAgrees !== false);
      break;
    case "lookFailed":
      s.pending({ look: false });
      s.set({ nextLookAtMs: s.nowMs + config.retryMs });
      s.reached(false);
      break;
    case "campaigned":
      campaigned(s, input.won);
      break;
    case "campaignFailed":
      // It may have committed: the next look tells.
      s.pending({ campaign: false });
      s.reached(false);
      if (s.state.phase === "campaigning") s.set({ phase: "standby", nextLookAtMs: s.nowMs });
      break;
    case "stale":
      if (s.state.phase === "active") stepDown(s, "stale", input.reason);
      break;
    case "stop":
      stop(s);
      return { state: s.state, effects: s.effects };
  }
  due(s);
  return { state: s.state, effects: s.effects };
}

/** A lease whose window closes within the margin is of no use for campaigning or serving. */
function usable(s: Step): boolean {
  const lease = s.state.lease;
  return lease !== null && s.nowMs < lease.validUntilMs - s.config.marginMs;
}

function fenceIfDue(s: Step): void {
  const lease = s.state.lease;
  if (lease === null) return;
  if (s.state.phase === "active" && s.nowMs >= lease.validUntilMs - s.config.marginMs) {
    stepDown(s, "renewal-overdue", `no renewal of etcd lease ${lease.id} confirmed in time; stopping device I/O before it can expire`);
    return;
  }
  if (s.state.phase !== "active" && s.nowMs >= lease.validUntilMs) {
    // A standby's lease that may be gone: a fresh one, rather than campaign on a corpse.
    giveUpLease(s);
  }
}

/** Out of the active role: device I/O stops first; the lease is given up so the key goes at once. */
function stepDown(s: Step, reason: StepDownReason, detail: string): void {
  s.emit({ kind: "deactivate", reason, detail });
  giveUpLease(s);
}

/**
 * Back to idle without a lease; a fresh one is asked for at once. The old one is revoked
 * (best effort: a key still attached to it goes now, not after its TTL). An answer about it
 * still in flight is ignored when it comes.
 */
function giveUpLease(s: Step): void {
  const lease = s.state.lease;
  if (lease !== null) s.emit({ kind: "revoke", id: lease.id });
  s.set({ phase: "idle", lease: null, term: null, nextGrantAtMs: s.nowMs });
  s.pending({ renew: false });
}

function stop(s: Step): void {
  if (s.state.phase === "active") s.emit({ kind: "deactivate", reason: "shutdown", detail: "the gateway is shutting down" });
  if (s.state.lease !== null) s.emit({ kind: "revoke", id: s.state.lease.id });
  s.set({ phase: "stopped", lease: null, term: null });
}

function granted(s: Step, id: string, ttlMs: number, sentAtMs: number): void {
  s.pending({ grant: false });
  s.reached(true);
  if (s.state.phase !== "idle" || s.state.lease !== null) {
    s.emit({ kind: "revoke", id }); // not asked for any more
    return;
  }
  const ttl = Math.min(s.config.ttlMs, ttlMs);
  s.set({
    phase: "standby",
    lease: { id, ttlMs: ttl, validUntilMs: sentAtMs + ttl },
    nextRenewAtMs: sentAtMs + s.config.renewEveryMs,
    nextLookAtMs: s.nowMs,
  });
  // Granted too late to be of use (a paused process): the lease goes, another is asked for.
  fenceIfDue(s);
}

function renewed(s: Step, id: string, ttlMs: number, sentAtMs: number): void {
  const lease = s.state.lease;
  if (lease === null || lease.id !== id) return; // an answer about a lease given up since
  s.pending({ renew: false });
  s.reached(true);
  if (ttlMs <= 0) {
    if (s.state.phase === "active") stepDown(s, "lease-lost", `etcd no longer knows lease ${id}; another gateway may lead`);
    else giveUpLease(s);
    return;
  }
  const ttl = Math.min(lease.ttlMs, ttlMs);
  s.set({
    lease: { ...lease, validUntilMs: Math.max(lease.validUntilMs, sentAtMs + ttl) },
    nextRenewAtMs: sentAtMs + s.config.renewEveryMs,
  });
}

function looked(s: Step, leaseId: string, leader: "none" | "other" | { readonly mine: Term }, configAgrees: boolean): void {
  s.pending({ look: false });
  s.reached(true);
  s.set({ nextLookAtMs: s.nowMs + (s.state.phase === "active" ? s.config.renewEveryMs : s.config.lookEveryMs) });
  // "mine" was judged against the lease the look named: about a lease given up since, it says nothing.
  if (s.state.lease?.id !== leaseId) return;
  if (s.state.phase === "active") {
    const term = s.state.term;
    if (typeof leader !== "object" || term === null || leader.mine.revision !== term.revision) {
      stepDown(s, "deposed", "the leader key is no longer this gateway's");
    }
    return;
  }
  if (s.state.phase !== "standby" || !usable(s)) return;
  if (leader === "none") {
    // After a failover it would serve the same controllers differently (another safe value, range, actuator).
    if (!configAgrees) return;
    s.set({ phase: "campaigning" });
    s.pending({ campaign: true });
    s.emit({ kind: "campaign", leaseId: s.state.lease!.id });
  } else if (typeof leader === "object") {
    activate(s, leader.mine); // an earlier campaign had won; its answer was lost
  }
}

function campaigned(s: Step, won: Term | null): void {
  s.pending({ campaign: false });
  s.reached(true);
  if (s.state.phase !== "campaigning") return;
  if (won === null) {
    s.set({ phase: "standby", nextLookAtMs: s.nowMs + s.config.lookEveryMs });
    return;
  }
  if (!usable(s)) {
    // Won, but the window is already closing: give it up rather than serve for nothing.
    giveUpLease(s);
    return;
  }
  activate(s, won);
}

function activate(s: Step, term: Term): void {
  s.set({ phase: "active", term, nextLookAtMs: s.nowMs + s.config.renewEveryMs });
  s.emit({ kind: "activate", term });
}

/** The requests that are due. */
function due(s: Step): void {
  const { state, nowMs, config } = s;
  if (state.phase === "idle" && !state.pending.grant && nowMs >= state.nextGrantAtMs) {
    s.pending({ grant: true });
    s.emit({ kind: "grant", ttlMs: config.ttlMs });
  }
  const lease = s.state.lease;
  if (lease !== null && !s.state.pending.renew && nowMs >= s.state.nextRenewAtMs) {
    s.pending({ renew: true });
    s.emit({ kind: "renew", id: lease.id });
  }
  if (
    (s.state.phase === "standby" || s.state.phase === "active") &&
    lease !== null &&
    !s.state.pending.look &&
    nowMs >= s.state.nextLookAtMs
  ) {
    s.pending({ look: true });
    s.emit({ kind: "look", leaseId: lease.id });
  }
}
