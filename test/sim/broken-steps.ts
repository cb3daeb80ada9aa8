/**
 * Deliberately broken acceptance rules, injected through the Gateway's `step` dependency
 * around the real core, so the checker's tests can show it catches each. Test code only.
 */
import { step } from "../../src/core/actuator.ts";
import type { ActuatorConfig, ActuatorState, Effect, Input, QueuedCommand, StepResult } from "../../src/core/types.ts";

/** Refusals the dequeue-time re-check makes that an arrival-only check would not. */
const RECHECK_CODES = new Set(["STALE_TOKEN", "LEASE_EXPIRED", "NOT_HOLDER", "STALE_SEQ", "UNKNOWN_TOKEN"]);

function refusedAtDequeue(before: ActuatorState, effects: readonly Effect[]): QueuedCommand | undefined {
  return before.queue.find((cmd) =>
    effects.some(
      (e) => e.kind === "reply" && cmd.ref !== null && e.ref === cmd.ref && !e.reply.ok && RECHECK_CODES.has(e.reply.error.code),
    ),
  );
}

/**
 * Bug (a): the fence and lease are checked when a command arrives, not again when it leaves
 * the queue. A queued command whose lease ended, or that a newer grant fenced off while it
 * waited, goes to the device anyway, and the fence moves to it as a naive gateway would.
 */
export function arrivalOnlyStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const result = step(config, state, input);
  const cmd = refusedAtDequeue(state, result.effects);
  if (cmd === undefined || result.state.inFlight !== null) return result;
  const effects: Effect[] = result.effects.filter(
    (e) =>
      !(e.kind === "reply" && e.ref === cmd.ref) &&
      !(
        e.kind === "event" &&
        e.event.type === "rejected" &&
        e.event.holder === cmd.holder &&
        e.event.token === cmd.token &&
        e.event.seq === cmd.seq
      ),
  );
  const record = { holder: cmd.holder, token: cmd.token, seq: cmd.seq, set: cmd.set, outcome: null };
  effects.push(
    { kind: "audit", record: { type: "intent", holder: cmd.holder, token: cmd.token, seq: cmd.seq, set: cmd.set } },
    { kind: "event", event: { type: "accepted", holder: cmd.holder, token: cmd.token, seq: cmd.seq } },
    { kind: "stateChanged" },
    { kind: "deviceWrite", holder: cmd.holder, token: cmd.token, seq: cmd.seq, set: cmd.set },
  );
  const recent = [...result.state.recent, record].slice(-config.limits.recentLimit);
  return { state: { ...result.state, fence: { token: cmd.token, seq: cmd.seq }, inFlight: cmd, recent }, effects };
}

/**
 * Bug (b): the fence persisted after the device write instead of before. Since commands stopped
 * waiting for the disk, the fence a write relies on is its token's grant (a command's intent is audit, after by
 * design): here a grant is persisted after the device write of the same step (the gateway's
 * own safe write at a restart or expiry), so a crash between them leaves a device moved under
 * a token the journal never had, and the next start may hand that token out again.
 */
export function grantAfterWriteStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const result = step(config, state, input);
  const write = result.effects.findIndex((e) => e.kind === "deviceWrite");
  const grants = result.effects.filter((e, i) => i < write && e.kind === "persist" && e.record.type === "granted");
  if (grants.length === 0) return result;
  const others = result.effects.filter((e) => !grants.includes(e));
  const at = others.findIndex((e) => e.kind === "deviceWrite");
  return { state: result.state, effects: [...others.slice(0, at + 1), ...grants, ...others.slice(at + 1)] };
}

/**
 * Bug (c): a reply says more than the device confirmed: a write whose answer never came
 * (OUTCOME_UNKNOWN) is taken, and replied, as applied.
 */
export function unconfirmedAppliedStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  if (input.type !== "deviceResult" || input.outcome.kind !== "failed" || input.outcome.code !== "OUTCOME_UNKNOWN")
    return step(config, state, input);
  const set = state.inFlight?.set ?? {};
  return step(config, state, { ...input, outcome: { kind: "applied", applied: set } });
}

/** Bug (d): grants are not journaled, so a restart can hand out a token again. */
export function unjournaledGrantStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const result = step(config, state, input);
  return { state: result.state, effects: result.effects.filter((e) => !(e.kind === "persist" && e.record.type === "granted")) };
}

/** Bug (e): an acquire takes the lease even while another holder's is live. */
export function stealingAcquireStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const result = step(config, state, input);
  if (input.type !== "acquire") return result;
  const held = result.effects.some((e) => e.kind === "reply" && !e.reply.ok && e.reply.error.code === "LEASE_HELD");
  return held ? step(config, { ...state, lease: null }, input) : result;
}

/** Bug (f): the safe write tried once: an attempt that fails, or cannot be sent, is dropped. */
export function safeWriteOnceStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const result = step(config, state, input);
  const owed = result.state.safeWrite;
  const triedOnce = owed !== null && (owed.attempts > 0 || !result.state.online) && result.state.inFlight?.internal !== true;
  return triedOnce ? { ...result, state: { ...result.state, safeWrite: null } } : result;
}

/** Bug (g): a restart ends the leases but owes no safe write. */
export function restartWithoutSafeWriteStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  return step(config, state, input.type === "restart" ? { type: "tick", nowMs: input.nowMs } : input);
}

/**
 * Bug (h): a grant's reply leaves before its record is durable (the reply is moved ahead of
 * the persist, and the shell carries effects out in order). A crash between the two lets the
 * restarted gateway grant the same token again, or a stale holder act on a lease nobody knows.
 */
export function grantReplyBeforeDurableStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const result = step(config, state, input);
  const grant = result.effects.findIndex((e) => e.kind === "persist" && e.record.type === "granted");
  if (grant < 0) return result;
  const replies = result.effects.filter((e) => e.kind === "reply");
  return {
    state: result.state,
    effects: [
      ...result.effects.slice(0, grant).filter((e) => e.kind !== "reply"),
      ...replies,
      ...result.effects.slice(grant).filter((e) => e.kind !== "reply"),
    ],
  };
}

/** Bug (i): the core forgets an authenticated lease's counter, so a replayed renew or release passes. */
export function forgetfulCounterStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  const lease = state.lease === null ? null : { ...state.lease, counter: undefined };
  return step(config, { ...state, lease }, input);
}

/** Bug (j): the MAC checked over something other than what the controller signed (here its last hex digit flipped). */
export function wrongMacFieldsStep(config: ActuatorConfig, state: ActuatorState, input: Input): StepResult {
  if (input.type !== "renew" && input.type !== "release" && input.type !== "command") return step(config, state, input);
  const mac = input.signature?.mac;
  if (typeof mac !== "string") return step(config, state, input);
  const flipped = mac.slice(0, -1) + (mac.endsWith("0") ? "1" : "0");
  return step(config, state, { ...input, signature: { ...input.signature!, mac: flipped } });
}
