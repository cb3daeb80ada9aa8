/**
 * What holds of the core's state after every step, and across one step (the state before,
 * the input, the state after and the effects), whatever the inputs. The core's tests assert
 * them after every step they feed (test/unit/core/harness.ts) and the simulator after every step
 * of every seed (src/sim/run.ts), beside its history checker: the checker judges what the
 * world saw, these judge the decisions as they are made.
 *
 * Each function returns what is broken, in words (empty: nothing); `assertStep` throws.
 */
import { compareFence as compare, GATEWAY_HOLDER, isAboveFence } from "./actuator.ts";
import type { ActuatorConfig, ActuatorState, Effect, Fence, Input, ReplyRef, StepResult } from "./types.ts";

const show = (f: { token: number; seq: number | null }) => `(${f.token}, ${f.seq ?? "-"})`;

/** What holds of any state the core returns. */
export function stateViolations(config: ActuatorConfig, state: ActuatorState): string[] {
  const broken: string[] = [];
  const { fence, highestGranted, lease, queue, inFlight, recent, safeWrite } = state;
  const { limits } = config;
  // A grant raises the fence to its token; a device's fence raises both.
  if (fence.token > highestGranted) broken.push(`the fence ${show(fence)} is above the highest token granted, ${highestGranted}`);
  if (lease !== null) {
    // A live lease is the newest grant: any later grant (a safe write's, a takeover's, a device's fence) ends it.
    if (lease.token !== highestGranted || state.lastGrantHolder !== lease.holder) {
      broken.push(`the live lease (${lease.holder}, ${lease.token}) is not the newest grant (${state.lastGrantHolder}, ${highestGranted})`);
    }
    if (lease.holder === GATEWAY_HOLDER) broken.push("a lease is held under the gateway's own name");
    if (safeWrite !== null) broken.push(`a safe write (token ${safeWrite.token}) is owed while the lease of token ${lease.token} is live`);
  }
  if (safeWrite !== null) {
    if (config.expiryPolicy.kind !== "safe") broken.push("a safe write is owed under expiry policy hold");
    if (safeWrite.token > highestGranted)
      broken.push(`the safe write's token ${safeWrite.token} is above the highest granted, ${highestGranted}`);
  }
  if (queue.length > limits.queueLimit) broken.push(`${queue.length} commands queued, above the limit ${limits.queueLimit}`);
  if (!state.online && queue.length > 0) broken.push(`${queue.length} commands queued while the device is offline`);
  if (queue.some((c) => c.internal)) broken.push("the gateway's own safe write is in the queue");
  if (recent.length > limits.recentLimit) broken.push(`${recent.length} commands remembered, above the limit ${limits.recentLimit}`);
  // Each command is accepted above the fence its predecessor set: (token, seq) rises along `recent`.
  for (let i = 1; i < recent.length; i++) {
    const [a, b] = [recent[i - 1]!, recent[i]!];
    if (!isAboveFence(b.token, b.seq, a)) broken.push(`the remembered commands do not rise: ${show(a)} before ${show(b)}`);
  }
  const newest = recent.at(-1);
  if (newest !== undefined && compare(newest, fence) > 0)
    broken.push(`the newest command ${show(newest)} is above the fence ${show(fence)}`);
  // Only the command at the device waits for its outcome, and it is the newest remembered.
  const pending = recent.filter((r) => r.outcome === null);
  if (
    inFlight === null
      ? pending.length > 0
      : pending.length !== 1 || newest === undefined || pending[0] !== newest || !sameCommand(newest, inFlight)
  ) {
    broken.push(
      `commands without an outcome ${pending.map(show).join(", ") || "none"} are not just the one at the device ${inFlight === null ? "(none)" : show(inFlight)}`,
    );
  }
  if (inFlight !== null && inFlight.internal !== (inFlight.holder === GATEWAY_HOLDER))
    broken.push(`the command at the device ${show(inFlight)} is internal but for a holder, or the reverse`);
  return broken;
}

function sameCommand(a: { holder: string; token: number; seq: number }, b: { holder: string; token: number; seq: number }): boolean {
  return a.holder === b.holder && a.token === b.token && a.seq === b.seq;
}

function refsOf(state: ActuatorState): Set<ReplyRef> {
  const refs = new Set<ReplyRef>();
  for (const cmd of [...state.queue, ...(state.inFlight === null ? [] : [state.inFlight])]) if (cmd.ref !== null) refs.add(cmd.ref);
  return refs;
}

/** What holds across one step: `result` is what the core returned for `input` on `before`. */
export function stepViolations(config: ActuatorConfig, before: ActuatorState, input: Input, result: StepResult): string[] {
  const { state: after, effects } = result;
  const broken = stateViolations(config, after);
  if (after.highestGranted < before.highestGranted)
    broken.push(`the highest token granted went down, ${before.highestGranted} -> ${after.highestGranted}`);
  if (compare(after.fence, before.fence) < 0) broken.push(`the fence went down, ${show(before.fence)} -> ${show(after.fence)}`);
  if (after.lease !== null && after.lease.expiresAtMs <= input.nowMs)
    broken.push(`the lease of token ${after.lease.token} outlived its expiry`);
  checkEffects(before, input, after, effects, broken);
  checkReplies(before, input, after, effects, broken);
  if (input.type === "grantFailed") checkUnconfirmed(input, after, broken);
  // A change the state shows is published (the shell publishes on stateChanged only).
  const shown = (s: ActuatorState) =>
    JSON.stringify([s.online, s.lease?.holder, s.lease?.token, s.fence, s.safeWrite?.token, s.safeWrite?.attempts]);
  if (shown(before) !== shown(after) && !effects.some((e) => e.kind === "stateChanged"))
    broken.push(`the state shown changed without stateChanged (${input.type})`);
  return broken;
}

/** Grants durable before what rests on them; a device write only after its intent, above the fence, under the lease. */
function checkEffects(before: ActuatorState, input: Input, after: ActuatorState, effects: readonly Effect[], broken: string[]): void {
  let durable = before.highestGranted; // the previous step's grants are durable before this step's effects run
  let fence: Fence = before.fence;
  const intents: Effect[] = [];
  let writes = 0;
  for (const e of effects) {
    switch (e.kind) {
      case "persist":
        if (e.record.type === "granted" && e.record.token <= durable)
          broken.push(`token ${e.record.token} granted again (highest before: ${durable})`);
        durable = Math.max(durable, e.record.token);
        if (compare(e.record.type === "granted" ? { token: e.record.token, seq: null } : e.record, fence) > 0)
          fence = e.record.type === "granted" ? { token: e.record.token, seq: null } : e.record;
        break;
      case "audit":
        if (e.record.type === "intent") intents.push(e);
        else if (
          !answersTheDevice(input, e.record) ||
          before.inFlight === null ||
          before.inFlight.token !== e.record.token ||
          before.inFlight.seq !== e.record.seq
        ) {
          broken.push(`an outcome recorded for ${show(e.record)}, not the command at the device answered now`);
        }
        break;
      case "deviceWrite": {
        writes++;
        const intent = intents.find((i) => i.kind === "audit" && i.record.type === "intent" && sameCommand(i.record, e));
        if (intent === undefined) broken.push(`a device write ${show(e)} without its intent recorded before it`);
        if (!isAboveFence(e.token, e.seq, fence)) broken.push(`a device write ${show(e)} not above the fence ${show(fence)}`);
        if (e.token > durable) broken.push(`a device write ${show(e)} under a token not durably granted (highest: ${durable})`);
        fence = { token: e.token, seq: e.seq };
        // The gateway's own write is the safe write owed, sent with no lease live; any other, the live lease's.
        const underLease =
          e.holder === GATEWAY_HOLDER
            ? after.lease === null && after.safeWrite?.token === e.token
            : after.lease?.holder === e.holder && after.lease.token === e.token;
        if (!underLease) broken.push(`a device write ${show(e)} of ${e.holder} outside its lease`);
        if (after.inFlight === null || !sameCommand(after.inFlight, e))
          broken.push(`a device write ${show(e)} that is not the command at the device`);
        break;
      }
      case "reply":
        if (e.reply.ok && "lease" in e.reply && e.reply.lease !== null && e.reply.lease.token > durable) {
          broken.push(`a lease of token ${e.reply.lease.token} replied before its grant is durable`);
        }
        break;
      case "event":
      case "stateChanged":
        break;
    }
  }
  if (writes > 1) broken.push(`${writes} device writes in one step: one command is at the device at a time`);
  if (after.inFlight !== null && after.inFlight !== before.inFlight && writes === 0)
    broken.push(`a command at the device ${show(after.inFlight)} that was never written`);
}

/** After a grant the group refused, nothing rests on it or on the step's later grants, withheld with it. */
function checkUnconfirmed(input: Extract<Input, { type: "grantFailed" }>, after: ActuatorState, broken: string[]): void {
  const unconfirmed = new Set([input.token]);
  for (const w of input.withheld) if (w.kind === "persist" && w.record.type === "granted") unconfirmed.add(w.record.token);
  if (after.lease !== null && unconfirmed.has(after.lease.token))
    broken.push(`the lease of token ${after.lease.token} outlived the group's refusal of its grant`);
  if (after.safeWrite !== null && unconfirmed.has(after.safeWrite.token) && !after.safeWrite.unconfirmed)
    broken.push(`a safe write is owed under token ${after.safeWrite.token}, which the group never confirmed`);
}

/** Whether `input` settles the write of (token, seq): the device's answer, or a grant failed before that write was sent. */
function answersTheDevice(input: Input, command: { token: number; seq: number }): boolean {
  if (input.type === "deviceResult") return true;
  return (
    input.type === "grantFailed" &&
    input.withheld.some((w) => w.kind === "deviceWrite" && w.token === command.token && w.seq === command.seq)
  );
}

/** Every reply goes to a request waiting for one, once: the input's, a command the state held, or one a failed grant withheld. */
function checkReplies(before: ActuatorState, input: Input, after: ActuatorState, effects: readonly Effect[], broken: string[]): void {
  const waiting = refsOf(before);
  if (input.type === "grantFailed") for (const w of input.withheld) if (w.kind === "reply" && w.ref !== null) waiting.add(w.ref);
  const held = refsOf(after);
  const inputRef = "ref" in input ? input.ref : null;
  const replied = new Set<ReplyRef>();
  for (const e of effects) {
    if (e.kind !== "reply" || e.ref === null) continue;
    if (replied.has(e.ref)) broken.push(`two replies to request ${e.ref} in one step`);
    replied.add(e.ref);
    if (e.ref !== inputRef && !waiting.has(e.ref)) broken.push(`a reply to request ${e.ref}, which is not waiting for one`);
    if (held.has(e.ref)) broken.push(`request ${e.ref} replied and still queued or at the device`);
  }
  for (const ref of held) if (ref !== inputRef && !waiting.has(ref)) broken.push(`request ${ref} queued from nowhere`);
  for (const ref of waiting) if (!held.has(ref) && !replied.has(ref)) broken.push(`request ${ref} dropped without a reply`);
  if (inputRef !== null && !replied.has(inputRef) && !(input.type === "command" && held.has(inputRef)))
    broken.push(`request ${inputRef} (${input.type}) got no reply and is not held`);
}

export class InvariantError extends Error {
  override readonly name = "InvariantError";
}

/** Throws {@link InvariantError} naming everything broken across the step. */
export function assertStep(config: ActuatorConfig, before: ActuatorState, input: Input, result: StepResult): void {
  const broken = stepViolations(config, before, input, result);
  if (broken.length > 0) throw new InvariantError(`after ${input.type}: ${broken.join("; ")}`);
}
