/**
 * The shell: feeds requests, device results, link changes and time into the pure core,
 * and carries out the effects it returns, in order, per actuator:
 *
 *   persist  → a grant: awaited (group commit) before anything after it in the same step
 *   audit    → a command's record: queued in the journal's ordered stream, not awaited
 *   deviceWrite → started; its outcome comes back as a `deviceResult` input
 *   reply / event / stateChanged → handed to the outbox
 *
 * Effects of successive steps of one actuator run strictly one after another, so a reply
 * or a published state never runs ahead of a grant. In a gateway group a grant can still
 * fail after the core made it (etcd refuses or does not answer): until the group has settled
 * it, the actuator's next inputs wait, so no decision rests on a grant nobody holds.
 * Whatever is shown outside the core's effects (a `read` reply, the state published after a
 * poll, /status) shows the state as of the last step whose effects have all been carried out
 * (see {@link ActuatorRuntime.showable}).
 *
 * What may be shown before it is durable, and why: nothing about a lease or a token (its
 * grant is persisted first), but a command's (token, seq) inside the live lease may be shown
 * before its audit record is on disk: the state shows it once the device has answered it
 * (until then the fence before it), and the `accepted` event and the fence in a refusal
 * name it as the decision it is. The seq part of the fence matters only inside one live
 * lease, and memory holds it there; every lease ends at restart and the next grant is above
 * every token granted before, so after a crash no command under an earlier token is
 * accepted again, whatever seq the journal kept; a fenced device stores its own fence in the
 * same FC16 as the setpoint and refuses an older token by itself. A crash can only make a
 * retry of such a command a lease error instead of DUPLICATE (or, its outcome lost, DUPLICATE
 * of OUTCOME_UNKNOWN), and the fence's seq under the dead token read lower than it was shown.
 */
import type { Logger } from "pino";
import { initialState, nextWakeMs, viewLease, type DurableSnapshot, type step } from "../core/actuator.ts";
import type { ActuatorConfig, ActuatorState, Effect, Fence, Input } from "../core/types.ts";
import type { DecisionEvents } from "./decision-events.ts";
import { DeviceSupervisor } from "./device-supervision.ts";
import type { GatewayLife } from "./gateway-life.ts";
import type { GroupCommitter } from "./group-commit.ts";
import { ActuatorGroupRole } from "./group-role.ts";
import {
  DeviceMismatchError,
  type Clock,
  type DevicePort,
  type GrantCommit,
  type GroupPort,
  type JournalEntry,
  type Outbox,
  type Scheduler,
  type StateView,
} from "./ports.ts";

export interface ActuatorBinding {
  readonly id: string;
  readonly config: ActuatorConfig;
  readonly device: DevicePort;
  /** Fenced devices keep their own fence; until it has been read no lease is granted. */
  readonly fenced: boolean;
  readonly pollIntervalMs: number;
  readonly defaultDeadlineMs: number;
  /** Commands, renewals and releases must carry a MAC keyed with the lease's secret. */
  readonly authenticated?: boolean;
}
/**
 * What an actuator's runtime is handed by the gateway that owns it: the services it acts
 * through, never the gateway itself.
 */
export interface RuntimeServices {
  readonly gatewayId: string;
  readonly clock: Clock;
  readonly scheduler: Scheduler;
  readonly log: Logger;
  readonly outbox: Outbox;
  /** The core's transition function (see GatewayDeps.step). */
  readonly step: typeof step;
  readonly group: GroupPort | undefined;
  readonly committer: GroupCommitter;
  readonly life: GatewayLife;
  readonly events: DecisionEvents;
}

/**
 * Whether two views say the same, but for what changes every millisecond (the time, the
 * points' age, the lease's countdown): a state is published on a change of substance only.
 * Compared in place: building a key of each view (JSON) cost two strings per command.
 */
function sameSubstance(a: StateView, b: StateView): boolean {
  for (const k of Object.keys(b) as (keyof StateView)[]) {
    if (k === "at" || k === "pointsAgeMs") continue;
    if (k === "lease") {
      if (a.lease?.holder !== b.lease?.holder || a.lease?.token !== b.lease?.token) return false;
    } else if (!sameData(a[k], b[k])) return false;
  }
  return Object.keys(a).length === Object.keys(b).length;
}

/** Deep equality of JSON-like data (numbers, strings, booleans, null, plain objects). */
function sameData(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) {
    if (!Object.hasOwn(b, k) || !sameData((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  return true;
}
/** An input decided `nowMs`, later than it arrived: a command's deadline still counts from its arrival. */
function decidedLater(input: Input, nowMs: number): Input {
  if (input.type === "command") return { ...input, nowMs, deadlineMs: Math.max(0, input.deadlineMs - (nowMs - input.nowMs)) };
  return { ...input, nowMs };
}
export class ActuatorRuntime {
  /** The core's state: decisions are made on it, some of them not yet durable. */
  state: ActuatorState;
  /** The state as of the last step whose effects were all carried out: the one shown. */
  private shown: ActuatorState;
  /** The fence before the command now at the device: shown until the device answers it. */
  private fenceBeforeWrite: Fence;
  /** Polls, read-backs, and whether the device counts as online (src/shell/device-supervision.ts). */
  readonly device: DeviceSupervisor;
  fenceKnown: boolean;
  /** In a gateway group: this actuator's takeover and the group's confirmation of its grants; null alone. */
  readonly group: ActuatorGroupRole | null;
  private chain: Promise<void> = Promise.resolve();
  private cancelWake: (() => void) | null = null;
  private lastPublished: StateView | null = null;
  closed = false;

  constructor(
    readonly binding: ActuatorBinding,
    snapshot: DurableSnapshot,
    private readonly services: RuntimeServices,
  ) {
    this.state = initialState(snapshot);
    this.shown = this.state;
    this.fenceBeforeWrite = this.state.fence;
    this.fenceKnown = !binding.fenced;
    const { clock, scheduler, log, group } = services;
    this.group = group === undefined ? null : new ActuatorGroupRole(binding.id, binding.device, binding.fenced, group, log);
    this.device = new DeviceSupervisor(
      { actuator: binding.id, device: binding.device, pollIntervalMs: binding.pollIntervalMs, clock, scheduler, log },
      {
        changed: (online) => {
          if (online !== this.state.online) this.services.life.enter((nowMs) => this.dispatch({ type: "link", nowMs, online }));
          else this.publishState(); // the problem or the points may have changed
        },
        answered: () => {
          if (!this.fenceKnown || (this.group !== null && !this.group.secured)) void this.learnFence(); // an earlier attempt failed: retry
        },
        foreign: () => {
          this.fenceKnown = !binding.fenced; // whatever answers now, its fence is not the one read
        },
      },
    );
  }

  get id(): string {
    return this.binding.id;
  }

  dispatch(input: Input): void {
    if (this.group?.holds(input)) return;
    this.decide(input);
  }

  /**
   * Runs the core on `input` now. A step that grants in a gateway group holds the inputs
   * after it until the group has settled the grant (group-role.ts, holds).
   */
  private decide(input: Input): void {
    const before = this.state;
    const result = this.services.step(this.binding.config, this.state, input);
    this.state = result.state;
    const snapshot = this.showable(before, result.state);
    if (result.effects.length > 0) {
      const group = this.group;
      const grants = group !== null && result.effects.some((e) => e.kind === "persist" && e.record.type === "granted");
      if (grants) group.grantStarted();
      const fatal = (err: unknown) => this.services.life.fatal(err);
      this.chain = this.chain
        .then(() => this.perform(result.effects, snapshot))
        .catch(fatal)
        // Settled even after a failed journal commit (then nothing more is decided: see GatewayLife.enter).
        .then(() => {
          if (grants) this.grantSettled(group);
        })
        .catch(fatal);
    }
    this.rearmWake();
  }

  /**
   * What of `after` may be shown once the step's effects are carried out: all of it, but for
   * the (token, seq) of a command still at the device, which is shown once the device has
   * answered (see the module comment). Until then the fence shown is the one before it: the
   * previous command's, answered, or the grant of its token (a grant raises the fence to
   * (token, null), durably, before any command under it is accepted).
   */
  private showable(before: ActuatorState, after: ActuatorState): ActuatorState {
    const cmd = after.inFlight;
    if (cmd === null) return after;
    if (cmd !== before.inFlight) this.fenceBeforeWrite = cmd.token > before.fence.token ? { token: cmd.token, seq: null } : before.fence;
    return { ...after, fence: this.fenceBeforeWrite };
  }

  /** A grant confirmed or refused (and the refusal decided on): the inputs that waited for it, decided now, in order. */
  private grantSettled(group: ActuatorGroupRole): void {
    group.grantSettled();
    for (let input = group.released(); input !== undefined; input = group.released()) {
      const held = input;
      this.services.life.enter((nowMs) => this.decide(decidedLater(held, nowMs)));
    }
  }

  /** Resolves when every effect handed out so far has been carried out. */
  settled(): Promise<void> {
    return this.chain;
  }

  private async perform(effects: readonly Effect[], snapshot: ActuatorState): Promise<void> {
    let stateChanged = false;
    for (let i = 0; i < effects.length; i++) {
      // After a failed commit nothing more is carried out, not even what was decided before
      // it: a later step's write may rest on the grant that failed (its audit record does not
      // wait for the disk, so nothing else would stop it).
      if (this.services.life.stopped) return;
      const effect = effects[i]!;
      switch (effect.kind) {
        case "persist": {
          // Consecutive records of one step form one durable unit.
          const entries = [{ actuator: this.id, record: effect.record }];
          while (effects[i + 1]?.kind === "persist") {
            const next = effects[++i] as Extract<Effect, { kind: "persist" }>;
            entries.push({ actuator: this.id, record: next.record });
          }
          const failure = await this.makeDurable(entries);
          if (failure !== null) {
            this.abandon(effects.slice(i + 1), failure);
            return;
          }
          break;
        }
        case "audit": {
          // Queued in order behind the grants before it, and not waited for: the device write
          // and the reply after it say only what the device confirmed (see the module comment).
          const entries = [{ actuator: this.id, record: effect.record }];
          while (effects[i + 1]?.kind === "audit") {
            const next = effects[++i] as Extract<Effect, { kind: "audit" }>;
            entries.push({ actuator: this.id, record: next.record });
          }
          this.services.committer.audit(entries);
          break;
        }
        case "deviceWrite":
          this.startWrite(effect);
          break;
        case "reply":
          if (effect.ref !== null) this.services.outbox.reply(effect.ref, effect.reply);
          break;
        case "event":
          this.services.events.publish(this.id, effect.event);
          break;
        case "stateChanged":
          stateChanged = true;
          break;
      }
    }
    // Once, after every persist of the step: a step's records may follow its stateChanged.
    this.shown = snapshot;
    if (stateChanged) this.publishState();
  }

  /**
   * A step's records, durable: in the journal and, for a grant in a gateway group, in the
   * group too (etcd, checked against leadership), both before anything after them. Returns
   * the grant the group did not confirm, or null.
   */
  private async makeDurable(entries: JournalEntry[]): Promise<{ token: number; commit: Extract<GrantCommit, { ok: false }> } | null> {
    const group = this.group;
    // The group keeps the highest token granted: committing the step's highest covers the
    // others (a takeover and the safe write it owes grant two), and two commits of one
    // actuator in flight at once could overtake each other.
    const token = group === null ? 0 : Math.max(0, ...entries.map((e) => (e.record.type === "granted" ? e.record.token : 0)));
    const journal = this.services.committer.persist(entries);
    if (token === 0) {
      await journal;
      return null;
    }
    const [, commit] = await Promise.all([journal, group!.commit(token)]);
    return commit.ok ? null : { token, commit };
  }

  /** After a grant the group could not confirm, the rest of its step goes back to the core undone (core/actuator.ts, grantFailed). */
  private abandon(withheld: readonly Effect[], failure: { token: number; commit: Extract<GrantCommit, { ok: false }> }): void {
    const { token, commit } = failure;
    this.services.log.warn(
      { actuator: this.id, token, stale: commit.stale, reason: commit.message },
      "grant not confirmed by the gateway group; nothing granted",
    );
    // Decided at once, ahead of the inputs waiting for the grant.
    this.services.life.enter((nowMs) => this.decide({ type: "grantFailed", nowMs, token, reason: commit.message, withheld }));
    this.group?.refused(commit);
  }

  private startWrite(cmd: Extract<Effect, { kind: "deviceWrite" }>): void {
    const { device } = this.binding;
    device
      .write(cmd)
      .then(async (outcome) => {
        if (outcome.kind === "failed" && outcome.code === "DEVICE_REJECTED" && this.binding.fenced) {
          if (this.group !== null) {
            this.group.deviceRefused(cmd.token); // before the refusal is answered
          } else {
            // The device's own fence is ahead of ours: learn it before the refusal is answered,
            // so no lease granted after the controller hears of it is at or below the device's
            // token. Until it has been read, no lease is granted at all.
            this.fenceKnown = false;
            await this.readDeviceFence();
          }
        }
        this.services.life.enter((nowMs) => this.dispatch({ type: "deviceResult", nowMs, token: cmd.token, seq: cmd.seq, outcome }));
        if (outcome.kind === "applied") this.device.applied(outcome.applied);
      })
      .catch((err: unknown) => this.services.life.fatal(err));
  }

  async readDeviceFence(): Promise<void> {
    if (!this.binding.fenced) return;
    try {
      const fence = await this.binding.device.readFence();
      if (fence === null || this.closed) return;
      this.fenceKnown = true;
      const fields = { actuator: this.id, deviceToken: fence.token, highestGranted: this.state.highestGranted };
      // Alone, only this gateway raises the fence, and only after its journal has the token: a
      // fence above a journal that has granted is another gateway's (a group member, a copy of
      // the journal). Tokens go on above it; the operator must find the other one.
      if (this.group === null && this.state.highestGranted > 0 && fence.token > this.state.highestGranted) {
        this.services.log.warn(
          fields,
          "the device's fence is above this gateway's journal: another gateway has granted tokens on this device (a member of a gateway group, or a copy of this journal); make sure only one gateway serves it",
        );
      } else this.services.log.info(fields, "device fence read");
      this.services.life.enter((nowMs) => this.dispatch({ type: "deviceFence", nowMs, token: fence.token, seq: fence.seq }));
    } catch (err) {
      if (err instanceof DeviceMismatchError) this.device.noteUnusable(err);
      else
        this.services.log.warn(
          { actuator: this.id, err },
          "could not read the device's fence; leases stay unavailable until it can be read",
        );
    }
  }

  linkChanged(online: boolean, reason: string | null): void {
    this.device.linkChanged(online, reason);
    if (online) {
      void this.learnFence();
      void this.device.poll();
    }
  }

  /** Alone: read the device's fence. In a group, while active: take the actuator over (once per term). */
  private learnFence(): Promise<unknown> {
    if (this.group === null) return this.readDeviceFence();
    return this.services.life.serving && !this.group.secured ? this.secure(this.group) : Promise.resolve();
  }

  /** Gateway group: takes this actuator over before any lease is granted (group-role.ts, secure). */
  secure(group: ActuatorGroupRole): Promise<boolean> {
    return group.secure({
      settled: () => this.settled(),
      serving: () => !this.closed && this.services.life.serving,
      takeover: (floor) => {
        this.services.life.enter((nowMs) => this.dispatch({ type: "takeover", nowMs, floor }));
        return this.state.highestGranted;
      },
      fenceToken: () => this.state.fence.token,
      takenOver: () => {
        this.fenceKnown = true;
      },
    });
  }

  /** Gateway group: no longer active. Leases end, polls stop, the next term takes over afresh. */
  standDown(): void {
    this.group?.standDown();
    this.fenceKnown = !this.binding.fenced;
    this.device.standDown();
    this.services.life.enter((nowMs) => this.dispatch({ type: "stepDown", nowMs }));
  }

  /** What may be shown of this actuator now: its durable decisions only. */
  view(): StateView {
    const { clock } = this.services;
    const nowMs = clock.monotonicMs();
    const snapshot = this.shown;
    const { expiryPolicy } = this.binding.config;
    const safe = snapshot.safeWrite;
    const points: Record<string, number> = {};
    const pointFaults: Record<string, string> = {};
    for (const [name, value] of Object.entries(this.device.points)) {
      if (Number.isFinite(value)) points[name] = value;
      else pointFaults[name] = `reads ${value}, not a finite number`;
    }
    return {
      actuator: this.id,
      online: snapshot.online,
      lease: viewLease(snapshot.lease, nowMs),
      fence: snapshot.fence,
      points,
      pointsAgeMs: this.device.pointsReadAtMs === null ? null : nowMs - this.device.pointsReadAtMs,
      pointFaults,
      problem: snapshot.online ? null : this.device.problem,
      gateway: this.services.gatewayId,
      safeWrite:
        safe !== null && expiryPolicy.kind === "safe" ? { token: safe.token, attempts: safe.attempts, set: expiryPolicy.set } : null,
      at: clock.wallNow(),
    };
  }

  /**
   * The answer to a `read`: a fresh poll of the device. When the device did not answer it,
   * the state says offline whatever the link's view (that waits for a second timeout), and
   * `pointsAgeMs` says how old the points are: never a stale read passed off as fresh.
   */
  async readNow(): Promise<StateView> {
    const answered = await this.device.poll();
    const view = this.view();
    return answered ? view : { ...view, online: false, problem: view.problem ?? "The device did not answer this read." };
  }

  publishState(): void {
    const view = this.view();
    this.services.outbox.observe?.(view);
    if (this.lastPublished !== null && sameSubstance(this.lastPublished, view)) return;
    this.lastPublished = view;
    this.services.outbox.state(view);
  }

  private rearmWake(): void {
    const wakeMs = nextWakeMs(this.state);
    this.cancelWake?.();
    this.cancelWake = null;
    if (wakeMs === null || this.closed) return;
    this.cancelWake = this.services.scheduler.at(wakeMs, () => {
      this.cancelWake = null;
      this.services.life.enter((nowMs) => this.dispatch({ type: "tick", nowMs }));
    });
  }

  stop(): void {
    this.closed = true;
    this.cancelWake?.();
    this.device.stop();
  }
}
