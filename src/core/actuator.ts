/**
 * The lease table and fence rule for one actuator: a pure transition function.
 *
 *   step(config, state, input) -> { state, effects }
 *
 * No I/O, no clock, no randomness: time arrives as `input.nowMs` (monotonic). Effects are
 * data, in the order the shell must perform them (see {@link Effect}): grants are persisted
 * before their reply, commands' records are an asynchronous audit. Every refusal is a
 * reply with a contract code, never an exception.
 */
import type { ErrorCode } from "../../packages/protocol/src/index.ts";
import type {
  ActuatorConfig,
  ActuatorState,
  CommandRecord,
  CoreEvent,
  Effect,
  ErrorBody,
  Fence,
  Input,
  Lease,
  LeaseView,
  Outcome,
  PointValues,
  QueuedCommand,
  Reply,
  ReplyRef,
  SafeWrite,
  StepResult,
} from "./types.ts";
import { checkSignature } from "./signed.ts";

/** The holder name of the gateway's own safe-value writes; not a valid controller holder id. */
export const GATEWAY_HOLDER = "@gateway";

const MAX_TOKEN = Number.MAX_SAFE_INTEGER;

export interface DurableSnapshot {
  readonly highestGranted: number;
  /** Who was granted `highestGranted`; null when it came from a device's fence or a floor. */
  readonly lastGrantHolder: string | null;
  readonly fence: Fence;
  readonly recent: readonly CommandRecord[];
}

/**
 * The state after a (re)start: durable parts from the journal, no lease, link unknown (down).
 * Feed it a `restart` input next: that ends the leases granted before and owes the safe write.
 */
export function initialState(snapshot: DurableSnapshot): ActuatorState {
  return {
    highestGranted: snapshot.highestGranted,
    lastGrantHolder: snapshot.lastGrantHolder,
    fence: snapshot.fence,
    lease: null,
    online: false,
    queue: [],
    inFlight: null,
    recent: snapshot.recent,
    safeWrite: null,
  };
}

export const EMPTY_SNAPSHOT: DurableSnapshot = { highestGranted: 0, lastGrantHolder: null, fence: { token: 0, seq: null }, recent: [] };

export function isLive(lease: Lease | null, nowMs: number): lease is Lease {
  return lease !== null && nowMs < lease.expiresAtMs;
}

export function viewLease(lease: Lease | null, nowMs: number): LeaseView | null {
  if (!isLive(lease, nowMs)) return null;
  return { holder: lease.holder, token: lease.token, expiresInMs: lease.expiresAtMs - nowMs };
}

/** Lexicographic `(token, seq)` order; a fence seq of null sorts below every seq. */
export function isAboveFence(token: number, seq: number, fence: Fence): boolean {
  if (token !== fence.token) return token > fence.token;
  return fence.seq === null || seq > fence.seq;
}

export function compareFence(a: Fence, b: Fence): number {
  if (a.token !== b.token) return a.token - b.token;
  return (a.seq ?? -1) - (b.seq ?? -1);
}

/** Accumulates the next state and the ordered effects of one step. */
class Step {
  readonly effects: Effect[] = [];
  constructor(
    readonly config: ActuatorConfig,
    public state: ActuatorState,
    readonly nowMs: number,
  ) {}

  set(patch: Partial<ActuatorState>): void {
    this.state = { ...this.state, ...patch };
  }
  emit(effect: Effect): void {
    this.effects.push(effect);
  }
  reply(ref: ReplyRef, reply: Reply): void {
    if (ref !== null) this.emit({ kind: "reply", ref, reply });
  }
  refuse(ref: ReplyRef, error: ErrorBody, about: { holder: string; token?: number; seq?: number }): void {
    this.reply(ref, { ok: false, error });
    const { holder, token, seq } = about;
    this.emit({
      kind: "event",
      event: {
        type: "rejected",
        holder,
        ...(token !== undefined ? { token } : {}),
        ...(seq !== undefined ? { seq } : {}),
        code: error.code,
      },
    });
  }
  result(): StepResult {
    return { state: this.state, effects: this.effects };
  }
}

export function step(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const s = new Step(config, state, input.nowMs);
  expireIfDue(s);
  switch (input.type) {
    case "acquire":
      acquire(s, input.ref, input.holder, input.ttlMs, input.secret);
      break;
    case "renew":
      if (admitted(s, input)) renew(s, input.ref, input.holder, input.token);
      break;
    case "release":
      if (admitted(s, input)) release(s, input.ref, input.holder, input.token);
      break;
    case "command":
      if (admitted(s, input)) arrive(s, input);
      break;
    case "deviceResult":
      deviceResult(s, input.token, input.seq, input.outcome);
      break;
    case "tick":
      dropOverdue(s);
      break;
    case "restart":
      restart(s);
      break;
    case "shutdown":
      shutdown(s);
      break;
    case "link":
      link(s, input.online);
      break;
    case "deviceFence":
      observeDeviceFence(s, { token: input.token, seq: input.seq });
      break;
    case "takeover":
      takeover(s, input.floor);
      break;
    case "stepDown":
      stepDown(s);
      break;
    case "grantFailed":
      grantFailed(s, input.token, input.reason, input.withheld);
      break;
  }
  pump(s);
  return s.result();
}

// ---------------------------------------------------------------------------------------
// Leases

function expireIfDue(s: Step): void {
  const { lease } = s.state;
  if (lease === null || s.nowMs < lease.expiresAtMs) return;
  endLease(s, lease, {});
}

/** Ends `lease` (not by its holder's release): `expired`, and for policy "safe" the safe write. */
function endLease(s: Step, lease: Lease, why: Pick<CoreEvent, "code" | "reason">): void {
  s.set({ lease: null });
  s.emit({ kind: "event", event: { type: "expired", holder: lease.holder, token: lease.token, ...why } });
  s.emit({ kind: "stateChanged" });
  oweSafeWrite(s);
}

/**
 * Policy "safe": the gateway takes a token of its own, which raises the fence exactly like a
 * grant (so nothing of the ended lease is accepted any more), and owes the device the safe
 * values until it confirms them or a newer grant supersedes them. `pump` sends the attempts.
 */
function oweSafeWrite(s: Step): void {
  if (s.config.expiryPolicy.kind !== "safe") return;
  const token = grantToken(s, GATEWAY_HOLDER);
  if (token === null) return;
  const attempts = s.state.safeWrite?.attempts ?? 0;
  s.set({ safeWrite: { token, seq: 0, attempts, notBeforeMs: s.state.safeWrite?.notBeforeMs ?? s.nowMs } });
  s.emit({ kind: "stateChanged" });
}

/** Raises highestGranted and the fence to a fresh token, durably before anything after it. */
function grantToken(s: Step, holder: string): number | null {
  if (s.state.highestGranted >= MAX_TOKEN) return null;
  const token = s.state.highestGranted + 1;
  s.set({ highestGranted: token, lastGrantHolder: holder, fence: { token, seq: null } });
  s.emit({ kind: "persist", record: { type: "granted", holder, token } });
  return token;
}

/**
 * The gateway restarted. Every lease granted before has ended, but the journal does not say
 * whether the newest one was still live, released or expired: it knows who got the newest
 * token and which commands were recorded. So a controller's newest grant is reported as
 * ended (`expired`, reason "restart"), and for policy "safe" the safe write is owed unless
 * the journal proves the device is already at the safe values: the newest record is the
 * gateway's own write under the newest token, confirmed applied. Anything else (a
 * controller's grant, with or without commands; the gateway's write unconfirmed or lost in
 * the crash; a token learned from a device) may leave the device at a controller's value
 * with no lease, and writing the safe values again is harmless.
 */
function restart(s: Step): void {
  const { highestGranted, lastGrantHolder, recent } = s.state;
  if (highestGranted === 0) return; // nothing was ever granted: no controller moved the device
  if (lastGrantHolder !== null && lastGrantHolder !== GATEWAY_HOLDER) {
    s.emit({ kind: "event", event: { type: "expired", holder: lastGrantHolder, token: highestGranted, reason: "restart" } });
  }
  const newest = recent.at(-1);
  const atSafeValues =
    lastGrantHolder === GATEWAY_HOLDER &&
    newest?.holder === GATEWAY_HOLDER &&
    newest.token === highestGranted &&
    newest.outcome?.kind === "applied";
  if (!atSafeValues) oweSafeWrite(s);
}

/** The gateway stops: the live lease ends now rather than at the next start. */
function shutdown(s: Step): void {
  const { lease } = s.state;
  if (lease !== null) endLease(s, lease, { reason: "shutdown" });
}

/** The pause before the next attempt, after `attempts` attempts sent. */
export function safeRetryDelayMs(limits: ActuatorConfig["limits"], attempts: number): number {
  const doublings = Math.min(Math.max(attempts - 1, 0), 30);
  return Math.min(limits.safeRetryMaxMs, limits.safeRetryMinMs * 2 ** doublings);
}

function leaseError(s: Step, code: ErrorCode, message: string): ErrorBody {
  const lease = viewLease(s.state.lease, s.nowMs);
  return { code, message, fence: s.state.fence, ...(lease ? { lease } : {}) };
}

function acquire(s: Step, ref: ReplyRef, holder: string, ttlMs: number, secret: string | undefined): void {
  const { minTtlMs, maxTtlMs } = s.config.limits;
  if (!(Number.isSafeInteger(ttlMs) && ttlMs >= minTtlMs && ttlMs <= maxTtlMs)) {
    s.refuse(ref, { code: "INVALID_REQUEST", message: `ttlMs must be an integer from ${minTtlMs} to ${maxTtlMs}.` }, { holder });
    return;
  }
  const current = s.state.lease;
  if (isLive(current, s.nowMs)) {
    if (current.holder !== holder) {
      s.refuse(ref, leaseError(s, "LEASE_HELD", `The lease is held by ${current.holder} until it expires or is released.`), { holder });
      return;
    }
    if (current.secret !== undefined) {
      // Handing the secret out again would give it to whoever claims the holder's name.
      s.refuse(
        ref,
        leaseError(
          s,
          "LEASE_HELD",
          `${holder} already holds this authenticated lease; its secret is not sent twice, so wait for it to expire.`,
        ),
        { holder },
      );
      return;
    }
    // The live holder asking again (typically a retry after a lost reply, or the holder
    // restarted) keeps its token; the fence tells it which seqs of that token are used.
    const lease: Lease = { ...current, ttlMs, expiresAtMs: s.nowMs + ttlMs };
    s.set({ lease });
    s.reply(ref, { ok: true, lease: { holder, token: lease.token, ttlMs }, fence: s.state.fence });
    s.emit({ kind: "event", event: { type: "renewed", holder, token: lease.token } });
    s.emit({ kind: "stateChanged" });
    return;
  }
  const token = grantToken(s, holder);
  if (token === null) {
    s.refuse(
      ref,
      {
        code: "TOKENS_EXHAUSTED",
        message:
          "Every token of this actuator up to 2^53-1 has been granted (a `fencegate journal recover --floor` set too high?): no lease can be granted again until its journal entry and its device's fence are reset (docs/deploy.md §7).",
      },
      { holder },
    );
    return;
  }
  // A newer grant supersedes the safe write still owed: the new holder decides now.
  s.set({ lease: { holder, token, ttlMs, expiresAtMs: s.nowMs + ttlMs, ...(secret !== undefined ? { secret } : {}) }, safeWrite: null });
  s.reply(ref, { ok: true, lease: { holder, token, ttlMs, ...(secret !== undefined ? { secret } : {}) } });
  s.emit({ kind: "event", event: { type: "granted", holder, token } });
  s.emit({ kind: "stateChanged" });
}

/**
 * The checks shared by renew, release and command, in the contract's order (after the
 * point checks and DUPLICATE, which only commands have). Returns the live lease on success.
 */
function checkLeaseToken(s: Step, holder: string, token: number): ErrorBody | Lease {
  const { fence, highestGranted, lease } = s.state;
  if (token > highestGranted) return unknownToken(s, token);
  if (token < fence.token) {
    return leaseError(s, "STALE_TOKEN", `Token ${token} is below the fence token ${fence.token}: a newer lease exists; re-read state.`);
  }
  if (!isLive(lease, s.nowMs) || lease.token !== token) {
    return leaseError(s, "LEASE_EXPIRED", `The lease for token ${token} has expired or was released; acquire a new one.`);
  }
  if (lease.holder !== holder) {
    return leaseError(s, "NOT_HOLDER", `Token ${token} belongs to holder ${lease.holder}, not ${holder}.`);
  }
  return lease;
}

function unknownToken(s: Step, token: number): ErrorBody {
  return leaseError(s, "UNKNOWN_TOKEN", `Token ${token} was never granted for this actuator (highest is ${s.state.highestGranted}).`);
}

/**
 * What is refused before a renew, release or command is looked at: under an authenticated
 * lease a wrong or missing MAC, or a replayed counter (signed.ts); then a command the journal
 * is too far behind to take. These rank ahead of every refusal of the lease checks.
 */
function admitted(s: Step, input: Extract<Input, { type: "renew" | "release" | "command" }>): boolean {
  const signed = checkSignature(s.state.lease, input);
  if ("error" in signed) {
    s.refuse(input.ref, signed.error, { holder: input.holder, token: input.token });
    return false;
  }
  if (signed.lease !== s.state.lease) s.set({ lease: signed.lease });
  if (input.type === "command" && input.journalBehind !== undefined) {
    s.refuse(input.ref, { code: "OVERLOADED", message: input.journalBehind }, input);
    return false;
  }
  return true;
}

function isError(x: ErrorBody | Lease): x is ErrorBody {
  return "code" in x;
}

function renew(s: Step, ref: ReplyRef, holder: string, token: number): void {
  const checked = checkLeaseToken(s, holder, token);
  if (isError(checked)) {
    s.refuse(ref, checked, { holder, token });
    return;
  }
  const lease: Lease = { ...checked, expiresAtMs: s.nowMs + checked.ttlMs };
  s.set({ lease });
  s.reply(ref, { ok: true, lease: { holder, token, ttlMs: lease.ttlMs } });
  s.emit({ kind: "event", event: { type: "renewed", holder, token } });
  s.emit({ kind: "stateChanged" });
}

function release(s: Step, ref: ReplyRef, holder: string, token: number): void {
  const checked = checkLeaseToken(s, holder, token);
  if (isError(checked)) {
    s.refuse(ref, checked, { holder, token });
    return;
  }
  s.set({ lease: null });
  s.reply(ref, { ok: true, lease: null });
  s.emit({ kind: "event", event: { type: "released", holder, token } });
  s.emit({ kind: "stateChanged" });
}

// ---------------------------------------------------------------------------------------
// Commands

function checkPoints(config: ActuatorConfig, set: PointValues): ErrorBody | null {
  const names = Object.keys(set);
  for (const name of names) {
    if (!Object.hasOwn(config.points, name)) {
      return { code: "UNKNOWN_POINT", message: `set.${name} is not a point of this actuator.` };
    }
  }
  for (const name of names) {
    if (!config.points[name]!.writable) return { code: "READ_ONLY_POINT", message: `set.${name} is read-only.` };
  }
  for (const name of names) {
    const spec = config.points[name]!;
    const value = set[name]!;
    if (!(value >= spec.min && value <= spec.max)) {
      return { code: "OUT_OF_RANGE", message: `set.${name} = ${value} is outside ${spec.min}..${spec.max}.` };
    }
  }
  return null;
}

/**
 * The record of (holder, token, seq), searched newest first. Each record was accepted above
 * the fence its predecessor set, so (token, seq) rises along `recent` and the search stops
 * at the first record below: a new command, above them all, costs one comparison, not a
 * scan of recentLimit records. (A record missed here could only be one not above the
 * fence, which the lease checks refuse anyway.)
 */
function findRecord(s: Step, holder: string, token: number, seq: number): CommandRecord | undefined {
  const { recent } = s.state;
  for (let i = recent.length - 1; i >= 0; i--) {
    const r = recent[i]!;
    if (r.token === token && r.seq === seq) return r.holder === holder ? r : undefined;
    if (r.token < token || (r.token === token && r.seq < seq)) return undefined;
  }
  return undefined;
}

export function outcomeReply(record: CommandRecord & { outcome: Outcome }): Reply {
  const { outcome, token, seq } = record;
  if (outcome.kind === "applied") return { ok: true, outcome: "applied", token, seq, applied: outcome.applied };
  return {
    ok: false,
    error: {
      code: outcome.code,
      message: outcome.message,
      ...(outcome.modbusCode !== undefined ? { modbusCode: outcome.modbusCode } : {}),
    },
  };
}

type Verdict = { kind: "accept" } | { kind: "refuse"; error: ErrorBody } | { kind: "pendingDuplicate" };

/** The acceptance rule, identical at arrival and at dequeue. */
function judge(s: Step, cmd: Pick<QueuedCommand, "holder" | "token" | "seq" | "set" | "internal">): Verdict {
  if (cmd.internal) {
    // The gateway's own write is valid only while no newer token has moved the fence.
    const { fence } = s.state;
    return fence.token === cmd.token && isAboveFence(cmd.token, cmd.seq, fence)
      ? { kind: "accept" }
      : { kind: "refuse", error: leaseError(s, "STALE_TOKEN", "A newer lease superseded the safe-value write.") };
  }
  const pointError = checkPoints(s.config, cmd.set);
  if (pointError) return { kind: "refuse", error: pointError };
  if (cmd.token > s.state.highestGranted) return { kind: "refuse", error: unknownToken(s, cmd.token) };
  const record = findRecord(s, cmd.holder, cmd.token, cmd.seq);
  if (record) {
    if (record.outcome === null) return { kind: "pendingDuplicate" };
    const original = outcomeReply({ ...record, outcome: record.outcome });
    return {
      kind: "refuse",
      error: {
        ...leaseError(s, "DUPLICATE", `Command (${cmd.token}, ${cmd.seq}) was already accepted; its original outcome is in "original".`),
        original,
      },
    };
  }
  const checked = checkLeaseToken(s, cmd.holder, cmd.token);
  if (isError(checked)) return { kind: "refuse", error: checked };
  const { fence } = s.state;
  if (!isAboveFence(cmd.token, cmd.seq, fence)) {
    return {
      kind: "refuse",
      error: leaseError(s, "STALE_SEQ", `seq ${cmd.seq} is not above the fence (${fence.token}, ${fence.seq}); use a higher seq.`),
    };
  }
  return { kind: "accept" };
}

function arrive(s: Step, input: Extract<Input, { type: "command" }>): void {
  const cmd: QueuedCommand = {
    ref: input.ref,
    holder: input.holder,
    token: input.token,
    seq: input.seq,
    set: input.set,
    deadlineAtMs: s.nowMs + input.deadlineMs,
    internal: false,
  };
  const verdict = judge(s, cmd);
  if (verdict.kind === "refuse") {
    s.refuse(cmd.ref, verdict.error, cmd);
    return;
  }
  if (!s.state.online) {
    s.refuse(cmd.ref, leaseError(s, "DEVICE_UNAVAILABLE", "The link to the device is down; the command was not sent."), cmd);
    return;
  }
  if (s.state.queue.length >= s.config.limits.queueLimit) {
    s.refuse(cmd.ref, leaseError(s, "OVERLOADED", `The actuator's queue is full (${s.config.limits.queueLimit}); retry later.`), cmd);
    return;
  }
  // A retry of the command now at the device waits its turn and is answered from the record.
  s.set({ queue: [...s.state.queue, cmd] });
}

/**
 * Sends the next acceptable command to the device, re-judging it at this moment: an owed
 * safe write first, once its backoff has passed (queued commands can then only be stale
 * ones of the ended lease), else the queue's head.
 */
function pump(s: Step): void {
  sendSafeWriteIfDue(s);
  while (s.state.inFlight === null && s.state.queue.length > 0) {
    const [cmd, ...rest] = s.state.queue as [QueuedCommand, ...QueuedCommand[]];
    s.set({ queue: rest });
    if (s.nowMs >= cmd.deadlineAtMs) {
      s.refuse(
        cmd.ref,
        leaseError(s, "DEADLINE_EXCEEDED", "The command's deadline passed before it could be sent; the device was not touched."),
        cmd,
      );
      continue;
    }
    if (!s.state.online) {
      s.refuse(cmd.ref, leaseError(s, "DEVICE_UNAVAILABLE", "The link to the device is down; the command was not sent."), cmd);
      continue;
    }
    const verdict = judge(s, cmd);
    if (verdict.kind === "refuse") {
      s.refuse(cmd.ref, verdict.error, cmd);
      continue;
    }
    if (verdict.kind === "pendingDuplicate") {
      // Unreachable while one command is in flight at a time; refusing keeps it safe if not.
      s.refuse(cmd.ref, leaseError(s, "INTERNAL", "A duplicate found its original still pending."), cmd);
      continue;
    }
    accept(s, cmd);
  }
}

function sendSafeWriteIfDue(s: Step): void {
  const owed = s.state.safeWrite;
  const { expiryPolicy } = s.config;
  if (owed === null || expiryPolicy.kind !== "safe" || s.state.inFlight !== null || !s.state.online || s.nowMs < owed.notBeforeMs) return;
  const safe = owed.unconfirmed ? regrantSafeWrite(s, owed) : owed;
  if (safe === null) return;
  const cmd: QueuedCommand = {
    ref: null,
    holder: GATEWAY_HOLDER,
    token: safe.token,
    seq: safe.seq,
    set: expiryPolicy.set,
    deadlineAtMs: s.nowMs,
    internal: true,
  };
  if (judge(s, cmd).kind !== "accept") return; // unreachable: a newer grant clears the safe write
  s.set({ safeWrite: { ...safe, seq: safe.seq + 1, attempts: safe.attempts + 1 } });
  accept(s, cmd);
}

/** A fresh token for a safe write whose token the group never confirmed (grantFailed), or null when none is left. */
function regrantSafeWrite(s: Step, owed: SafeWrite): SafeWrite | null {
  const token = grantToken(s, GATEWAY_HOLDER);
  if (token === null) return null;
  const safe: SafeWrite = { token, seq: 0, attempts: owed.attempts, notBeforeMs: owed.notBeforeMs };
  s.set({ safeWrite: safe });
  return safe;
}

function accept(s: Step, cmd: QueuedCommand): void {
  const record: CommandRecord = { holder: cmd.holder, token: cmd.token, seq: cmd.seq, set: cmd.set, outcome: null };
  s.set({
    fence: { token: cmd.token, seq: cmd.seq },
    inFlight: cmd,
    recent: appendBounded(s.state.recent, record, s.config.limits.recentLimit),
  });
  s.emit({ kind: "audit", record: { type: "intent", holder: cmd.holder, token: cmd.token, seq: cmd.seq, set: cmd.set } });
  // The write first: publishing the event and the state is not on the device's path.
  s.emit({ kind: "deviceWrite", holder: cmd.holder, token: cmd.token, seq: cmd.seq, set: cmd.set });
  s.emit({ kind: "event", event: { type: "accepted", holder: cmd.holder, token: cmd.token, seq: cmd.seq } });
  s.emit({ kind: "stateChanged" });
}

/** `recent` with `record` appended, the oldest dropped beyond `limit`: one copy per command. */
function appendBounded(recent: readonly CommandRecord[], record: CommandRecord, limit: number): readonly CommandRecord[] {
  const kept = recent.slice(Math.max(0, recent.length + 1 - limit));
  kept.push(record);
  return kept;
}

function deviceResult(s: Step, token: number, seq: number, outcome: Outcome): void {
  const cmd = s.state.inFlight;
  if (cmd === null || cmd.token !== token || cmd.seq !== seq) return; // not ours: nothing waits for it
  // The command's record is the newest of its (holder, token, seq): replaced in one copy.
  const at = s.state.recent.findLastIndex((r) => r.token === token && r.seq === seq && r.holder === cmd.holder);
  const recent = at < 0 ? s.state.recent : s.state.recent.with(at, { ...s.state.recent[at]!, outcome });
  s.set({ inFlight: null, recent });
  const safe = s.state.safeWrite;
  if (cmd.internal && safe !== null) {
    // Confirmed under the token it is owed under: nothing more is owed. Failed or unknown
    // (or refused by a device whose fence moved it to a newer token): again, after the backoff.
    if (outcome.kind !== "applied")
      s.set({ safeWrite: { ...safe, notBeforeMs: s.nowMs + safeRetryDelayMs(s.config.limits, safe.attempts) } });
    else if (safe.token === token) s.set({ safeWrite: null });
  }
  s.emit({ kind: "audit", record: { type: "outcome", token, seq, outcome } });
  const reply = outcomeReply({ ...cmd, outcome });
  if (reply.ok) {
    s.reply(cmd.ref, reply);
    s.emit({
      kind: "event",
      event: { type: "applied", holder: cmd.holder, token, seq, ...(outcome.kind === "applied" ? { applied: outcome.applied } : {}) },
    });
  } else {
    s.reply(cmd.ref, { ok: false, error: { ...leaseError(s, reply.error.code, reply.error.message), ...reply.error } });
    const type = reply.error.code === "OUTCOME_UNKNOWN" ? "outcome-unknown" : "rejected";
    s.emit({ kind: "event", event: { type, holder: cmd.holder, token, seq, code: reply.error.code } });
  }
  s.emit({ kind: "stateChanged" });
}

function dropOverdue(s: Step): void {
  const keep: QueuedCommand[] = [];
  for (const cmd of s.state.queue) {
    if (s.nowMs >= cmd.deadlineAtMs) {
      s.refuse(
        cmd.ref,
        leaseError(s, "DEADLINE_EXCEEDED", "The command's deadline passed before it could be sent; the device was not touched."),
        cmd,
      );
    } else {
      keep.push(cmd);
    }
  }
  if (keep.length !== s.state.queue.length) s.set({ queue: keep });
}

function link(s: Step, online: boolean): void {
  if (s.state.online === online) return;
  s.set({ online });
  s.emit({ kind: "stateChanged" });
  if (online) return;
  // An owed safe write stays owed: it is sent once the link is back.
  for (const cmd of s.state.queue) {
    s.refuse(cmd.ref, leaseError(s, "DEVICE_UNAVAILABLE", "The link to the device went down; the command was not sent."), cmd);
  }
  s.set({ queue: [] });
}

/**
 * A fenced device reports its own stored fence (at start, or after it refused a write).
 * If it is ahead of ours (a fresh or restored journal), we move up to it so no token at or
 * below it is ever granted again.
 */
function observeDeviceFence(s: Step, device: Fence): void {
  const fence = compareFence(device, s.state.fence) > 0 ? device : s.state.fence;
  const highestGranted = Math.max(s.state.highestGranted, device.token);
  if (fence === s.state.fence && highestGranted === s.state.highestGranted) return;
  const learned = highestGranted > s.state.highestGranted;
  s.set({ fence, highestGranted, ...(learned ? { lastGrantHolder: null } : {}) });
  // A grant always raises the fence to the new token, so fence.token === highestGranted.
  s.emit({ kind: "persist", record: { type: "fenceObserved", token: fence.token, seq: fence.seq } });
  s.emit({ kind: "stateChanged" });
  const { lease, safeWrite } = s.state;
  if (lease !== null && lease.token < highestGranted) endLease(s, lease, { code: "STALE_TOKEN" });
  // The device refuses the owed safe write's token now: it is owed under a token above the device's.
  else if (safeWrite !== null && safeWrite.token < highestGranted) oweSafeWrite(s);
}

// ---------------------------------------------------------------------------------------
// Gateway group

/**
 * Takeover: whatever lease this gateway knew ends (a takeover is uncertainty, like a
 * restart), and the gateway grants itself a token above the group's and the device's
 * (`floor`) and its own journal's. The grant raises the fence like any other, so nothing
 * queued under an older token is sent; the shell writes the token to the device. With
 * policy "safe" the safe write is owed, as after a restart: the new gateway cannot know
 * whether a lease of the old one was live.
 */
function takeover(s: Step, floor: number): void {
  if (floor > s.state.highestGranted) s.set({ highestGranted: Math.min(floor, MAX_TOKEN), lastGrantHolder: null });
  const { lease } = s.state;
  if (lease !== null) {
    s.set({ lease: null });
    s.emit({ kind: "event", event: { type: "expired", holder: lease.holder, token: lease.token, code: "STALE_TOKEN" } });
  }
  const token = grantToken(s, GATEWAY_HOLDER);
  if (token === null) return;
  s.set({ safeWrite: null });
  s.emit({ kind: "event", event: { type: "granted", holder: GATEWAY_HOLDER, token } });
  s.emit({ kind: "stateChanged" });
  oweSafeWrite(s);
}

/**
 * No longer the active gateway: leases end, nothing queued is sent, and nothing is owed any
 * more (the safe write is the active gateway's business now).
 */
function stepDown(s: Step): void {
  const { lease } = s.state;
  if (lease !== null)
    s.emit({ kind: "event", event: { type: "expired", holder: lease.holder, token: lease.token, code: "DEVICE_UNAVAILABLE" } });
  for (const cmd of s.state.queue) {
    s.refuse(
      cmd.ref,
      leaseError(
        s,
        "DEVICE_UNAVAILABLE",
        "This gateway is no longer the group's active gateway; the command was not sent. Send it to the active one.",
      ),
      cmd,
    );
  }
  s.set({ lease: null, queue: [], online: false, safeWrite: null });
  s.emit({ kind: "stateChanged" });
}

/**
 * A grant the group never confirmed: nothing of the step that made it may be shown as if it had
 * been. A success reply becomes GROUP_UNAVAILABLE, a device write was not sent (its command
 * fails DEVICE_UNAVAILABLE), events and the state wait for this step; refusals pass (they claim
 * nothing). Unconfirmed are `token` and the step's later grants, withheld with it (a lease
 * expired into a safe write and a new lease granted in one step; a takeover and its safe
 * write). A lease under one ends: nothing moved under it, so no safe write is owed for it. A
 * safe write owed under one stays owed, under a fresh token (sendSafeWriteIfDue).
 */
function grantFailed(s: Step, token: number, reason: string, withheld: readonly Effect[]): void {
  const unconfirmed = new Set([token]);
  for (const effect of withheld) {
    if (effect.kind === "persist" && effect.record.type === "granted") unconfirmed.add(effect.record.token);
    else if (effect.kind === "reply") {
      const message = `The gateway group could not confirm the grant (${reason}); nothing was granted. Retry shortly.`;
      s.reply(effect.ref, effect.reply.ok ? { ok: false, error: { code: "GROUP_UNAVAILABLE", message } } : effect.reply);
    } else if (effect.kind === "deviceWrite") {
      const message = "The command was not sent: the gateway group could not confirm the token it needed.";
      deviceResult(s, effect.token, effect.seq, { kind: "failed", code: "DEVICE_UNAVAILABLE", message });
    }
  }
  const { lease, safeWrite } = s.state;
  if (safeWrite !== null && unconfirmed.has(safeWrite.token)) s.set({ safeWrite: { ...safeWrite, unconfirmed: true } });
  if (lease === null || !unconfirmed.has(lease.token)) return;
  s.set({ lease: null });
  s.emit({ kind: "event", event: { type: "expired", holder: lease.holder, token: lease.token, code: "GROUP_UNAVAILABLE" } });
  s.emit({ kind: "stateChanged" });
}

/**
 * When the shell must next feed a `tick`: the lease's expiry, the nearest queued deadline,
 * or the next attempt of an owed safe write (only while it can be sent: link up, device idle).
 */
export function nextWakeMs(state: ActuatorState): number | null {
  let wake = state.lease?.expiresAtMs ?? Number.POSITIVE_INFINITY;
  for (const cmd of state.queue) wake = Math.min(wake, cmd.deadlineAtMs);
  if (state.safeWrite !== null && state.online && state.inFlight === null) wake = Math.min(wake, state.safeWrite.notBeforeMs);
  return Number.isFinite(wake) ? wake : null;
}
