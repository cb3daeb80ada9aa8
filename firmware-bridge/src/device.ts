/**
 * The register-map logic of one simulated actuator: the fenced and the plain profile, the
 * physical model and the communications-loss watchdog. Pure apart from the EEPROM it is
 * given; time is always an argument (`now`, ms), never read from a clock here.
 */
import {
  COMMAND_SETPOINT_COUNT,
  DEVICE_TYPE_REFERENCE_ACTUATOR,
  EXCEPTION,
  FAULT,
  FENCE_REFUSED_EXCEPTION,
  FENCED,
  PLAIN,
  POSITION_RAW_MAX,
  PROFILE_ID,
  PROFILE_MAGIC,
  PROFILE_VERSION,
  PROFILE_VERSION_1_0,
  REFUSAL,
  STATUS,
  compareFence,
  decodeCommandBlockRaw,
  rawToPosition,
  u32ToWords,
  u64ToWords,
} from "../../packages/protocol/src/modbus-profile.ts";

export const FIRMWARE_VERSION = 0x0100;

/** What a unit keeps in its EEPROM. token is a decimal string (64-bit, JSON-safe). */
export interface PersistedUnit {
  readonly token: string;
  readonly seq: number;
  /** The last accepted command block's registers, to recognise an exact repeat. */
  readonly block: readonly number[];
  /** The accepted setpoint (raw 0.01 %). */
  readonly target: number;
  /** The watchdog tripped after this setpoint was accepted: power up in safe state, not at `target`. */
  readonly safe?: boolean;
}

/** The device's non-volatile memory. `save` returns only once the data is durable; throws on failure. */
export interface Eeprom {
  load(unit: number): PersistedUnit | undefined;
  save(unit: number, state: PersistedUnit): void;
  /** Power cycle: forget what is not durable (for `unit`, or all). Optional. */
  reload?(unit?: number): void;
}

export class MemoryEeprom implements Eeprom {
  readonly data = new Map<number, PersistedUnit>();
  failSaves = false;
  load(unit: number): PersistedUnit | undefined {
    return this.data.get(unit);
  }
  save(unit: number, state: PersistedUnit): void {
    if (this.failSaves) throw new Error("EEPROM write failed");
    this.data.set(unit, state);
  }
}

export type Profile = "fenced" | "plain";

export interface DeviceConfig {
  readonly unit: number;
  readonly profile: Profile;
  /** Communications-loss watchdog, ms; 0 disables it. At most 65535 (one register). */
  readonly watchdogMs: number;
  /** Raw 0.01 % units. */
  readonly safePositionRaw: number;
  /** The fenced profile version it implements: 1.1 (default) or 1.0 (no FENCE_RAISE block). */
  readonly profileVersion?: typeof PROFILE_VERSION | typeof PROFILE_VERSION_1_0;
  /** Travel rate in raw units (0.01 %) per second; 0 = moves instantly. */
  readonly rateRawPerS: number;
}

/** A Modbus exception the register map answers with. */
export interface Refusal {
  readonly exception: number;
}

export interface AppliedCommand {
  /** Fenced profile only; the token as a number (exact up to 2^53-1) and as decimal text. */
  readonly token?: number;
  readonly tokenText?: string;
  readonly seq?: number;
  readonly setpoints: { readonly position: number };
  readonly at: number;
}

/** Thrown by a device to simulate power loss right after persisting, before acting. */
export class PowerLoss extends Error {
  constructor() {
    super("simulated power loss between persist and act");
  }
}

export interface DeviceSnapshot {
  readonly unit: number;
  readonly profile: Profile;
  readonly fence: { readonly token: number; readonly tokenText: string; readonly seq: number };
  readonly targetPosition: number;
  readonly actualPosition: number;
  readonly safeState: boolean;
  readonly status: number;
  readonly faults: number;
  readonly lastRefusalReason: number;
  readonly refusalCount: number;
  readonly appliedCount: number;
  readonly keepAlives: number;
  readonly applied: readonly AppliedCommand[];
  /** Every fence raise accepted (profile 1.1): the fence moved, nothing else did. */
  readonly raises: readonly FenceRaised[];
}

export interface FenceRaised {
  readonly token: number;
  readonly tokenText: string;
  readonly seq: number;
  readonly at: number;
}

/**
 * One actuator. `read`/`write` are the register map as Modbus sees it (0-based addresses);
 * every call first advances the physical model and the watchdog to `now`.
 */
export class Device {
  // EEPROM-backed
  private fenceToken = 0n;
  private fenceSeq = 0;
  private lastBlock: readonly number[] = [];
  private setpoint = 0;
  // RAM
  private target = 0;
  private actual = 0;
  private lastT = 0;
  private lastComms = 0;
  private safeState = false;
  private faults = 0;
  private lastRefusal: number = REFUSAL.NONE;
  private refusalCount = 0;
  private appliedCount = 0;
  private keepAlives = 0;
  /** Every command acted on since this object was created (survives power cycles). */
  readonly applied: AppliedCommand[] = [];
  readonly raises: FenceRaised[] = [];
  /** Fault injection: the next N accepted commands lose power after persisting, before acting. */
  crashAfterPersist = 0;

  constructor(
    readonly config: DeviceConfig,
    private readonly eeprom: Eeprom,
    now: number,
  ) {
    this.powerUp(now, undefined);
  }

  /**
   * Power-up: fence and setpoint come back from the EEPROM, RAM state is reset, the watchdog
   * starts counting. The device resumes its stored setpoint (which completes a command whose
   * power was cut between commit and action), unless the record says the watchdog had
   * tripped: then it stays in safe state. `physicalPosition` is where the mechanism physically
   * is (it does not move during a power cut); without it the device assumes it is at its target.
   */
  powerUp(now: number, physicalPosition: number | undefined): void {
    const stored = this.eeprom.load(this.config.unit);
    this.fenceToken = stored ? BigInt(stored.token) : 0n;
    this.fenceSeq = stored?.seq ?? 0;
    this.lastBlock = stored?.block ?? [];
    this.setpoint = stored?.target ?? this.config.safePositionRaw;
    this.safeState = stored?.safe === true;
    this.target = this.safeState ? this.config.safePositionRaw : this.setpoint;
    this.actual = physicalPosition ?? this.target;
    this.lastT = now;
    this.lastComms = now;
    this.faults = 0;
    this.lastRefusal = REFUSAL.NONE;
    this.refusalCount = 0;
    this.appliedCount = 0;
  }

  /** Power cycle keeping the mechanism where it is. */
  powerCycle(now: number): void {
    this.advance(now);
    this.powerUp(now, this.actual);
  }

  // -------------------------------------------------------------------------------------------
  // physics and watchdog

  /** Advance the model to `now`, tripping the watchdog at the exact moment it expires. */
  advance(now: number): void {
    const wd = this.config.watchdogMs;
    if (wd > 0 && !this.safeState && this.lastComms + wd <= now) {
      this.move(this.lastComms + wd);
      this.safeState = true;
      this.target = this.config.safePositionRaw;
      this.persist({ safe: true }); // so a power cycle does not resume the abandoned setpoint
    }
    this.move(now);
  }

  private move(t: number): void {
    const dt = Math.max(0, t - this.lastT);
    this.lastT = Math.max(t, this.lastT);
    const rate = this.config.rateRawPerS;
    const gap = this.target - this.actual;
    const step = (rate * dt) / 1000;
    this.actual = rate <= 0 || Math.abs(gap) <= step ? this.target : this.actual + Math.sign(gap) * step;
  }

  /** The EEPROM record of the current fence and setpoint, with `change` applied. False if the save failed. */
  private persist(change: Partial<PersistedUnit>): boolean {
    const record: PersistedUnit = {
      token: this.fenceToken.toString(),
      seq: this.fenceSeq,
      block: this.lastBlock,
      target: this.setpoint,
      ...(this.safeState ? { safe: true } : {}),
      ...change,
    };
    try {
      this.eeprom.save(this.config.unit, record);
      this.faults &= ~FAULT.PERSIST;
      return true;
    } catch {
      this.faults |= FAULT.PERSIST;
      return false;
    }
  }

  private feed(now: number): void {
    this.lastComms = now;
  }

  // -------------------------------------------------------------------------------------------
  // the register map

  private status(): number {
    let s = 0;
    if (Math.round(this.actual) !== this.target) s |= STATUS.MOVING;
    if (this.safeState) s |= STATUS.SAFE_STATE;
    if (this.config.profile === "fenced" && this.fenceToken > 0n) s |= STATUS.FENCED;
    if (this.faults !== 0) s |= STATUS.FAULT;
    return s;
  }

  private mapEnd(): number {
    if (this.config.profile === "plain") return PLAIN.MAP_END;
    return this.raiseSupported() ? FENCED.MAP_END : FENCED.MAP_END_1_0;
  }

  private raiseSupported(): boolean {
    return (this.config.profileVersion ?? PROFILE_VERSION) >= PROFILE_VERSION;
  }

  private fencedImage(): Map<number, number> {
    const m = new Map<number, number>();
    const put = (addr: number, words: readonly number[]) => words.forEach((w, i) => m.set(addr + i, w));
    put(FENCED.IDENTITY_START, [
      PROFILE_MAGIC,
      PROFILE_ID.FENCED,
      this.config.profileVersion ?? PROFILE_VERSION,
      DEVICE_TYPE_REFERENCE_ACTUATOR,
      FIRMWARE_VERSION,
    ]);
    put(FENCED.SERIAL_NUMBER, u32ToWords(0x4647_0000 + this.config.unit));
    put(FENCED.SETPOINT_COUNT, [COMMAND_SETPOINT_COUNT]);
    put(FENCED.FENCE_TOKEN, u64ToWords(this.fenceToken));
    put(FENCED.FENCE_SEQ, u32ToWords(this.fenceSeq));
    put(FENCED.LAST_REFUSAL_REASON, [this.lastRefusal, this.refusalCount & 0xffff]);
    put(FENCED.LIVE_START, [this.target, Math.round(this.actual), this.status(), this.faults, this.appliedCount & 0xffff]);
    put(FENCED.CONFIG_START, [this.config.watchdogMs, this.config.safePositionRaw, Math.min(0xffff, this.config.rateRawPerS)]);
    put(FENCED.COMMAND_START, this.lastBlock);
    return m;
  }

  private plainImage(): Map<number, number> {
    const status = this.status();
    return new Map([
      [PLAIN.TARGET_POSITION, this.target],
      [PLAIN.ACTUAL_POSITION, Math.round(this.actual)],
      [PLAIN.STATUS, status],
    ]);
  }

  /** FC03/FC04. Unmapped addresses inside the map read 0; beyond it: exception 02. */
  read(addr: number, count: number, now: number): number[] | Refusal {
    this.advance(now);
    if (addr + count > this.mapEnd()) return { exception: EXCEPTION.ILLEGAL_DATA_ADDRESS };
    const image = this.config.profile === "fenced" ? this.fencedImage() : this.plainImage();
    return Array.from({ length: count }, (_, i) => image.get(addr + i) ?? 0);
  }

  /** FC06 (one value) or FC16. `undefined` = accepted (answer normally). */
  write(addr: number, values: readonly number[], fc: 6 | 16, now: number): Refusal | undefined {
    this.advance(now);
    return this.config.profile === "fenced" ? this.writeFenced(addr, values, fc, now) : this.writePlain(addr, values, now);
  }

  private writePlain(addr: number, values: readonly number[], now: number): Refusal | undefined {
    const value = values[0];
    if (addr !== PLAIN.TARGET_POSITION || values.length !== 1 || value === undefined) {
      return { exception: EXCEPTION.ILLEGAL_DATA_ADDRESS };
    }
    if (value > POSITION_RAW_MAX) return { exception: EXCEPTION.ILLEGAL_DATA_VALUE };
    if (!this.persist({ target: value, safe: false })) return { exception: EXCEPTION.SERVER_DEVICE_FAILURE };
    this.act(value, now, {});
    return undefined;
  }

  private writeFenced(addr: number, values: readonly number[], fc: 6 | 16, now: number): Refusal | undefined {
    if (addr === FENCED.KEEPALIVE && values.length === 1) {
      this.keepAlives++;
      this.feed(now);
      return undefined;
    }
    const end = addr + values.length;
    const cmdEnd = FENCED.COMMAND_START + FENCED.COMMAND_COUNT;
    if (addr < cmdEnd && end > FENCED.COMMAND_START) {
      if (fc === 16 && addr === FENCED.COMMAND_START && values.length === FENCED.COMMAND_COUNT) return this.command(values, now);
      return this.refuse(REFUSAL.PARTIAL_BLOCK, EXCEPTION.ILLEGAL_DATA_ADDRESS);
    }
    const raiseEnd = FENCED.FENCE_RAISE_START + FENCED.FENCE_RAISE_COUNT;
    if (this.raiseSupported() && addr < raiseEnd && end > FENCED.FENCE_RAISE_START) {
      if (fc === 16 && addr === FENCED.FENCE_RAISE_START && values.length === FENCED.FENCE_RAISE_COUNT) return this.raise(values, now);
      return this.refuse(REFUSAL.PARTIAL_BLOCK, EXCEPTION.ILLEGAL_DATA_ADDRESS);
    }
    return { exception: EXCEPTION.ILLEGAL_DATA_ADDRESS };
  }

  private refuse(reason: number, exception: number): Refusal {
    this.lastRefusal = reason;
    this.refusalCount++;
    return { exception };
  }

  /**
   * The reference algorithm (README "Reference algorithm"): accept only a strictly greater
   * (token, seq); persist fence + setpoint before acting and before answering; acknowledge an
   * exact repeat of the last accepted block without acting; refuse everything else.
   */
  private command(block: readonly number[], now: number): Refusal | undefined {
    const cmd = decodeCommandBlockRaw(block);
    if (cmd.token === 0n || cmd.targetRaw > POSITION_RAW_MAX) return this.refuse(REFUSAL.INVALID_VALUE, EXCEPTION.ILLEGAL_DATA_VALUE);
    const order = compareFence(cmd, { token: this.fenceToken, seq: this.fenceSeq });
    if (order === 0) {
      if (sameWords(block, this.lastBlock)) {
        this.feed(now); // an exact repeat: acknowledged, not acted on again
        return undefined;
      }
      return this.refuse(REFUSAL.CONFLICT, FENCE_REFUSED_EXCEPTION);
    }
    if (order < 0) {
      return this.refuse(cmd.token < this.fenceToken ? REFUSAL.STALE_TOKEN : REFUSAL.STALE_SEQ, FENCE_REFUSED_EXCEPTION);
    }
    const committed = this.persist({ token: cmd.token.toString(), seq: cmd.seq, block: [...block], target: cmd.targetRaw, safe: false });
    if (!committed) return this.refuse(REFUSAL.PERSIST_FAILED, EXCEPTION.SERVER_DEVICE_FAILURE);
    if (this.crashAfterPersist > 0) {
      this.crashAfterPersist--;
      throw new PowerLoss();
    }
    this.fenceToken = cmd.token;
    this.fenceSeq = cmd.seq;
    this.lastBlock = [...block];
    this.act(cmd.targetRaw, now, { token: Number(cmd.token), tokenText: cmd.token.toString(), seq: cmd.seq });
    return undefined;
  }

  /**
   * Profile 1.1 FENCE_RAISE: the fence goes to a strictly greater (token, seq) as if a command
   * block carrying the stored setpoint had been accepted, but nothing acts: target, setpoint
   * and safe state stay, APPLIED_COUNT does not count it. Committed before the answer; an
   * exact repeat is acknowledged; a stale or conflicting one refused with 0x46. Feeds the
   * watchdog like a keep-alive.
   */
  private raise(words: readonly number[], now: number): Refusal | undefined {
    const block = [...words, ...this.lastBlock.slice(FENCED.FENCE_RAISE_COUNT)];
    if (block.length < FENCED.COMMAND_COUNT) block.push(this.setpoint); // never commanded: the stored setpoint
    const cmd = decodeCommandBlockRaw(block);
    if (cmd.token === 0n) return this.refuse(REFUSAL.INVALID_VALUE, EXCEPTION.ILLEGAL_DATA_VALUE);
    const order = compareFence(cmd, { token: this.fenceToken, seq: this.fenceSeq });
    if (order === 0) {
      if (!sameWords(block, this.lastBlock)) return this.refuse(REFUSAL.CONFLICT, FENCE_REFUSED_EXCEPTION);
      this.feed(now);
      return undefined;
    }
    if (order < 0) return this.refuse(cmd.token < this.fenceToken ? REFUSAL.STALE_TOKEN : REFUSAL.STALE_SEQ, FENCE_REFUSED_EXCEPTION);
    if (!this.persist({ token: cmd.token.toString(), seq: cmd.seq, block }))
      return this.refuse(REFUSAL.PERSIST_FAILED, EXCEPTION.SERVER_DEVICE_FAILURE);
    this.fenceToken = cmd.token;
    this.fenceSeq = cmd.seq;
    this.lastBlock = block;
    this.feed(now);
    this.raises.push({ token: Number(cmd.token), tokenText: cmd.token.toString(), seq: cmd.seq, at: now });
    return undefined;
  }

  private act(targetRaw: number, now: number, fence: { token?: number; tokenText?: string; seq?: number }): void {
    this.setpoint = targetRaw;
    this.target = targetRaw;
    this.safeState = false;
    this.appliedCount++;
    this.feed(now);
    this.applied.push({ ...fence, setpoints: { position: rawToPosition(targetRaw) }, at: now });
  }

  snapshot(now: number): DeviceSnapshot {
    this.advance(now);
    return {
      unit: this.config.unit,
      profile: this.config.profile,
      fence: { token: Number(this.fenceToken), tokenText: this.fenceToken.toString(), seq: this.fenceSeq },
      targetPosition: rawToPosition(this.target),
      actualPosition: rawToPosition(Math.round(this.actual)),
      safeState: this.safeState,
      status: this.status(),
      faults: this.faults,
      lastRefusalReason: this.lastRefusal,
      refusalCount: this.refusalCount,
      appliedCount: this.appliedCount,
      keepAlives: this.keepAlives,
      applied: [...this.applied],
      raises: [...this.raises],
    };
  }
}

function sameWords(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((w, i) => w === b[i]);
}
