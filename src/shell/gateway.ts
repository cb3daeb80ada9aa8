/**
 * The shell's facade: one runtime per actuator (actuator-runtime.ts), the journal's group
 * committer, and the door every request comes through (core/admission.ts). It hands each
 * runtime the services it acts through; no runtime holds the gateway.
 */
import type { Logger } from "pino";
import { EMPTY_SNAPSHOT, isLive, step, type DurableSnapshot } from "../core/actuator.ts";
import type { GatewayRequest } from "../../packages/protocol/src/index.ts";
import { admit, type Door } from "../core/admission.ts";
import type { ActuatorState, PointValues } from "../core/types.ts";
import { ActuatorRuntime, type ActuatorBinding, type RuntimeServices } from "./actuator-runtime.ts";
import { DecisionEvents } from "./decision-events.ts";
import { GatewayLife } from "./gateway-life.ts";
import { GroupCommitter, type AuditBounds } from "./group-commit.ts";
import type { Clock, GroupPort, Journal, JournalEntry, Outbox, Random, Scheduler, StateView } from "./ports.ts";
import { RefusalSummary } from "./refusal-summary.ts";

export interface GatewayDeps {
  /** The gatewayId, named in every state: clients read `B/gateway/<id>/status` with it. */
  readonly gatewayId: string;
  readonly journal: Journal;
  readonly clock: Clock;
  readonly scheduler: Scheduler;
  /** Where the lease secrets of authenticated actuators come from. */
  readonly random: Random;
  readonly outbox: Outbox;
  readonly log: Logger;
  readonly actuators: readonly ActuatorBinding[];
  /** Called when the journal cannot commit: nothing more may be decided. */
  readonly onFatal: (err: unknown) => void;
  /** How long a journal batch that finds the disk idle may wait for other actuators' records (see GroupCommitter). */
  readonly gatherMaxMs?: number;
  /** The audit trail's lag, queue and stall bounds (journal.audit* in the configuration); default DEFAULT_AUDIT_BOUNDS. */
  readonly audit?: AuditBounds;
  /** Told of each batch of journal records once it is durable (the status page's view of the journal). */
  readonly onDurable?: (entries: readonly JournalEntry[]) => void;
  /** The core's transition function; only the simulator's checker tests replace it (with a broken rule). */
  readonly step?: typeof step;
  /**
   * The gateway group this gateway belongs to, if any: a grant is durable only once the group
   * has it too, and a device refusing a write (0x46) means another gateway leads.
   */
  readonly group?: GroupPort;
  /** How often refusals are summarised in the log; default REFUSAL_SUMMARY_MS. */
  readonly refusalSummaryMs?: number;
}
/** An authenticated lease's secret: 256 bits, as HMAC-SHA256's key length. */
const SECRET_BYTES = 32;
export class Gateway {
  readonly committer: GroupCommitter;
  /** Refusals, the core's and those at the door (told by the MQTT link), summarised in the log. */
  readonly refusals: RefusalSummary;
  private readonly runtimes = new Map<string, ActuatorRuntime>();
  private nextRef = 1;
  private accepting = true;
  private readonly life: GatewayLife;

  constructor(
    readonly deps: GatewayDeps,
    snapshots: ReadonlyMap<string, DurableSnapshot>,
  ) {
    this.committer = new GroupCommitter(deps.journal, deps.scheduler, deps.clock, {
      gatherMaxMs: deps.gatherMaxMs ?? 0,
      onDurable: deps.onDurable,
      audit: deps.audit,
      onFailure: (err) => this.life.fatal(err),
      actuators: deps.actuators.length,
    });
    this.refusals = new RefusalSummary(deps.log, deps.clock, deps.scheduler, deps.refusalSummaryMs);
    this.life = new GatewayLife(deps.clock, deps.log, deps.onFatal, deps.group === undefined);
    const services: RuntimeServices = {
      gatewayId: deps.gatewayId,
      clock: deps.clock,
      scheduler: deps.scheduler,
      log: deps.log,
      outbox: deps.outbox,
      step: deps.step ?? step,
      group: deps.group,
      committer: this.committer,
      life: this.life,
      events: new DecisionEvents(deps.log, deps.clock, deps.outbox, this.refusals),
    };
    for (const binding of deps.actuators) {
      this.runtimes.set(binding.id, new ActuatorRuntime(binding, snapshots.get(binding.id) ?? EMPTY_SNAPSHOT, services));
    }
  }

  /** Alone: always. In a gateway group: while this gateway is the active one. */
  get serving(): boolean {
    return this.life.serving;
  }

  /**
   * Tells the core it restarted (every earlier lease has ended; a safe write may be owed)
   * and starts polling every actuator; link changes arrive through {@link linkChanged}.
   */
  start(): void {
    for (const rt of this.runtimes.values()) {
      this.life.enter((nowMs) => rt.dispatch({ type: "restart", nowMs }));
      rt.device.startPolling();
    }
  }

  /**
   * Gateway group: this gateway became active. Every actuator is taken over (device fences
   * raised to a token above everything before) before any lease is granted; then polling
   * starts. Resolves when each actuator has been tried; one that could not be (its device
   * unreachable) is tried again on its next poll or when its link comes up.
   */
  async takeOver(): Promise<void> {
    this.life.serving = true;
    const runtimes = [...this.runtimes.values()];
    await Promise.all(runtimes.map((rt) => (rt.group === null ? true : rt.secure(rt.group))));
    if (!this.life.serving) return;
    for (const rt of runtimes) rt.device.startPolling();
  }

  /** Gateway group: no longer active (device I/O has already stopped). Leases end; nothing more is sent. */
  standDown(): void {
    this.life.serving = false;
    for (const rt of this.runtimes.values()) rt.standDown();
  }

  /** Gateway group: every actuator taken over in this term. */
  allSecured(): boolean {
    return [...this.runtimes.values()].every((rt) => rt.group?.secured === true);
  }

  has(actuator: string): boolean {
    return this.runtimes.has(actuator);
  }

  actuatorIds(): string[] {
    return [...this.runtimes.keys()];
  }

  allocateRef(): number {
    return this.nextRef++;
  }

  /** The current view of an actuator (for read requests and /status), or undefined. */
  view(actuator: string): StateView | undefined {
    return this.runtimes.get(actuator)?.view();
  }

  /** The live lease's holder and token (null without one), undefined for an actuator not served here. */
  liveLease(actuator: string): { readonly holder: string; readonly token: number } | null | undefined {
    const rt = this.runtimes.get(actuator);
    if (rt === undefined) return undefined;
    const lease = rt.state.lease;
    return lease !== null && isLive(lease, this.deps.clock.monotonicMs()) ? lease : null;
  }

  /** Handles one validated request through the door (core/admission.ts). The reply, whatever it is, goes to `ref`. */
  submit(actuator: string, ref: number, request: GatewayRequest): void {
    const rt = this.runtimes.get(actuator);
    const admission = admit(actuator, ref, request, rt && this.door(rt, request.verb), this.deps.clock.monotonicMs());
    switch (admission.kind) {
      case "refused":
        this.deps.outbox.reply(ref, { ok: false, error: admission.error });
        return;
      case "read":
        void rt!.readNow().then((state) => this.deps.outbox.reply(ref, { ok: true, state }));
        return;
      case "decide":
        this.life.enter(() => rt!.dispatch(admission.input));
        return;
    }
  }

  /** What the door is shown of an actuator when a request for it arrives (a secret drawn and the backlog asked only where the verb needs them). */
  private door(rt: ActuatorRuntime, verb: GatewayRequest["verb"]): Door {
    return {
      accepting: this.accepting && !this.life.stopped,
      takenOver: rt.group === null ? null : rt.group.secured,
      fenceKnown: rt.fenceKnown,
      problem: rt.device.problem,
      defaultDeadlineMs: rt.binding.defaultDeadlineMs,
      journalBehind: verb === "command" && this.committer.saturatedFor(rt.id) ? this.journalBehindMessage(rt) : undefined,
      // Drawn here, not in the core, which stays free of randomness.
      secret:
        verb === "lease/acquire" && rt.binding.authenticated
          ? Buffer.from(this.deps.random.bytes(SECRET_BYTES)).toString("base64url")
          : undefined,
    };
  }

  /** Why a command is refused OVERLOADED, unsent: the journal is too far behind (this actuator's share of it, or all of it). */
  private journalBehindMessage(rt: ActuatorRuntime): string {
    const { records } = this.committer.backlog();
    const mine = this.committer.saturated ? "" : ` (${this.committer.backlogOf(rt.id)} of them this actuator's, its share)`;
    return `The journal is ${records} records behind${mine} (the disk is slower than the commands); the command was not sent. Retry shortly.`;
  }

  /** The bus's report on an actuator's unit: answering or not, and why not. */
  linkChanged(actuator: string, online: boolean, reason: string | null = null): void {
    this.runtimes.get(actuator)?.linkChanged(online, reason);
  }

  /** Reads an actuator's device now, outside its poll schedule (e.g. its bus has just opened). */
  pollNow(actuator: string): void {
    void this.runtimes.get(actuator)?.device.poll();
  }

  /**
   * Stops taking requests, ends every live lease (policy "safe": its safe write is owed) and
   * waits for every accepted command and every safe write the device can take now to finish
   * (or the timeout). What is left owed is owed again at the next start.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    this.accepting = false;
    for (const rt of this.runtimes.values()) this.life.enter((nowMs) => rt.dispatch({ type: "shutdown", nowMs }));
    const deadline = this.deps.clock.monotonicMs() + timeoutMs;
    for (;;) {
      const busy = [...this.runtimes.values()].some(
        (rt) => rt.state.inFlight !== null || rt.state.queue.length > 0 || (rt.state.safeWrite !== null && rt.state.online),
      );
      await Promise.all([...this.runtimes.values()].map((rt) => rt.settled()));
      if (!busy) break;
      if (this.deps.clock.monotonicMs() >= deadline) {
        await this.committer.idle(); // the audit records still within their lag, committed now
        return false;
      }
      await new Promise<void>((resolve) => this.deps.scheduler.at(this.deps.clock.monotonicMs() + 5, resolve));
    }
    for (const rt of this.runtimes.values()) rt.stop();
    this.refusals.flush();
    await this.committer.idle();
    return true;
  }

  stop(): void {
    for (const rt of this.runtimes.values()) rt.stop();
    this.refusals.flush();
  }

  state(actuator: string): ActuatorState | undefined {
    return this.runtimes.get(actuator)?.state;
  }

  points(actuator: string): PointValues | undefined {
    return this.runtimes.get(actuator)?.device.points;
  }
}
