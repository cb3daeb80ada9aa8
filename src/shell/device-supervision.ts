/**
 * One actuator's device, watched: the regular poll, the read-back after writes, what the
 * bus says of its unit, and the one rule for when the device counts as offline (its unit
 * does not answer, it is not the device configured, or its last polls got unusable answers).
 * It decides nothing about leases: it tells its actuator's runtime (the listener) when the
 * device's health changed, when a poll was answered and when the device proved foreign.
 */
import type { Logger } from "pino";
import type { PointValues } from "../core/types.ts";
import { DeviceAnswerError, DeviceMismatchError, type Clock, type DevicePort, type Scheduler } from "./ports.ts";

/**
 * After applied writes, the device is read back once commands to it have paused this long
 * (or after the poll interval, if shorter), not after every command: see {@link DeviceSupervisor.applied}.
 */
const READ_BACK_SETTLE_MS = 100;

/** Polls in a row whose answer was unusable (malformed, an exception) after which the actuator is reported offline. */
const OFFLINE_AFTER_BAD_POLLS = 2;

export interface SupervisionListener {
  /** The device's health, problem or points changed; `online` is what it counts as now. */
  changed(online: boolean): void;
  /** A poll was answered: the device is there (a fence read that failed can be tried again). */
  answered(): void;
  /** The device is not the one configured: whatever answers now, its fence is not the one read. */
  foreign(): void;
}

export interface SupervisionDeps {
  readonly actuator: string;
  readonly device: DevicePort;
  readonly pollIntervalMs: number;
  readonly clock: Clock;
  readonly scheduler: Scheduler;
  readonly log: Logger;
}

export class DeviceSupervisor {
  points: PointValues = {};
  /** Monotonic time the device last answered a read of its points; null: not yet. */
  pointsReadAtMs: number | null = null;
  /** The bus's word on the unit: answering, or not and why. */
  private link: { online: boolean; reason: string | null } = { online: false, reason: null };
  /** Why the device is not the one configured (fenced identity), or null. */
  private mismatch: string | null = null;
  /** Polls in a row that got an unusable answer, and what the last one was. */
  private badPolls = { count: 0, reason: "" };
  private polling: Promise<boolean> | null = null;
  /** Bumped when polling starts or stops, so a poll still in flight does not re-arm an old loop. */
  private pollEpoch = 0;
  private cancelPoll: (() => void) | null = null;
  /** When the pending read-back is due, and its timer (armed at most once at a time). */
  private readBackAtMs = 0;
  private cancelReadBack: (() => void) | null = null;
  private closed = false;

  constructor(
    private readonly deps: SupervisionDeps,
    private readonly listener: SupervisionListener,
  ) {}

  /** Online: the unit answers, the device is the one configured, and its polls succeed. */
  get online(): boolean {
    return this.link.online && this.mismatch === null && this.badPolls.count < OFFLINE_AFTER_BAD_POLLS;
  }

  /**
   * Why the actuator is offline or cannot be leased, for the state: the device is not the
   * one configured, its unit does not answer on the bus, or its polls get unusable answers.
   */
  get problem(): string | null {
    if (this.mismatch !== null) return this.mismatch;
    if (!this.link.online) return this.link.reason;
    return this.badPolls.count >= OFFLINE_AFTER_BAD_POLLS
      ? `The device's last ${this.badPolls.count} polls got unusable answers (the last: ${this.badPolls.reason}).`
      : null;
  }

  linkChanged(online: boolean, reason: string | null): void {
    this.link = { online, reason };
    this.listener.changed(this.online);
  }

  /** Reads the live points; concurrent callers share the read in progress. */
  poll(): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    this.polling ??= this.deps.device
      .read()
      .then((points) => {
        this.notePointFaults(points);
        this.points = points;
        this.mismatch = null;
        this.badPolls = { count: 0, reason: "" };
        this.pointsReadAtMs = this.deps.clock.monotonicMs();
        this.listener.changed(this.online);
        this.listener.answered();
        return true;
      })
      .catch((err: unknown) => {
        // A device that does not answer at all is reported offline by the bus.
        if (err instanceof DeviceAnswerError || err instanceof DeviceMismatchError) this.noteUnusable(err);
        return false;
      })
      .finally(() => {
        this.polling = null;
      });
    return this.polling;
  }

  /** A poll or fence read got an answer that cannot be used: count it, or (a foreign device) stop at once. */
  noteUnusable(err: DeviceAnswerError | DeviceMismatchError): void {
    const { log, actuator } = this.deps;
    if (err instanceof DeviceMismatchError) {
      if (this.mismatch !== err.message) log.error({ actuator, problem: err.message }, "device mismatch: not the device configured");
      this.mismatch = err.message;
      this.listener.foreign();
    } else {
      this.badPolls = { count: this.badPolls.count + 1, reason: err.message };
      if (this.badPolls.count === OFFLINE_AFTER_BAD_POLLS)
        log.warn({ actuator, problem: err.message }, "device answers polls unusably; reported offline");
    }
    this.listener.changed(this.online);
  }

  /**
   * A write was applied: its setpoints are the points at once, and the device is read back
   * once writes to it have paused for READ_BACK_SETTLE_MS. A read-back after every command
   * (FC06 keep-alive + FC03, or a share of a poll in progress) put about one more transaction
   * on the bus per command (bench: 36 others/s beside 36 commands/s on a shared line) and
   * queued the next command behind it. The regular poll keeps running under a steady stream
   * of commands.
   */
  applied(setpoints: PointValues): void {
    this.points = { ...this.points, ...setpoints };
    const { scheduler, clock } = this.deps;
    this.readBackAtMs = clock.monotonicMs() + Math.min(READ_BACK_SETTLE_MS, this.deps.pollIntervalMs);
    if (this.cancelReadBack !== null || this.closed) return;
    const arm = (atMs: number) => {
      this.cancelReadBack = scheduler.at(atMs, () => {
        if (clock.monotonicMs() < this.readBackAtMs) return arm(this.readBackAtMs); // written again meanwhile
        this.cancelReadBack = null;
        void this.poll();
      });
    };
    arm(this.readBackAtMs);
  }

  startPolling(): void {
    const epoch = ++this.pollEpoch;
    const loop = () => {
      if (this.closed || epoch !== this.pollEpoch) return;
      void this.poll().finally(() => {
        if (!this.closed && epoch === this.pollEpoch)
          this.cancelPoll = this.deps.scheduler.at(this.deps.clock.monotonicMs() + this.deps.pollIntervalMs, loop);
      });
    };
    loop();
  }

  /** Gateway group, no longer active: the device is another gateway's to drive; polls and read-backs stop. */
  standDown(): void {
    this.link = { online: false, reason: "This gateway stands by in its group: the active gateway drives the device." };
    this.stopTimers();
  }

  stop(): void {
    this.closed = true;
    this.stopTimers();
  }

  private stopTimers(): void {
    this.pollEpoch++;
    this.cancelPoll?.();
    this.cancelPoll = null;
    this.cancelReadBack?.();
    this.cancelReadBack = null;
  }

  /** Logs a point whose reading turned into something other than a finite number. */
  private notePointFaults(points: PointValues): void {
    for (const [point, value] of Object.entries(points)) {
      if (!Number.isFinite(value) && Number.isFinite(this.points[point] ?? 0)) {
        this.deps.log.warn(
          { actuator: this.deps.actuator, point, value: String(value) },
          "point fault: the reading is not a finite number",
        );
      }
    }
  }
}
