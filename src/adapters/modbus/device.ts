/**
 * An actuator on a Modbus bus, as the shell's {@link DevicePort}: reads its points, writes
 * commands, and (fenced profile) reads its own fence.
 *
 * Fenced profile: a command is ONE FC16 to the command block carrying token, seq and every
 * setpoint, so the device checks the fence in the same transaction that moves it. The
 * device's seq is 32 bits while the API's is 53, so the seq sent is this gateway's count of
 * writes under the token (0, 1, 2, ...): it rises exactly when accepted (token, seq) rise,
 * and it needs no durability because no token outlives a gateway restart (every lease
 * ends on restart and the next grant is higher).
 *
 * Plain profile: each point is written with FC16 at its register; the gateway is the only
 * arbiter, so nothing may write to such a device except through the gateway.
 */
import { FENCED, FENCE_REFUSED_EXCEPTION, MAX_SEQ, decodeFence, refusalName, u32ToWords, u64ToWords } from "../../../firmware-bridge/src/profile.ts";
import type { PointConfig } from "../../config/schema.ts";
import type { Fence, Outcome, PointValues } from "../../core/types.ts";
import type { DeviceCommand, DevicePort } from "../../shell/ports.ts";
import { BusBusyError, LinkDownError, isTimeout, modbusExceptionCode, type ModbusBus, type ModbusClient } from "./bus.ts";
import { decodePoint, encodePoint, registerSpan } from "./codec.ts";

/** A Modbus read may carry at most 125 registers. */
const MAX_READ_REGISTERS = 125;

export interface DeviceOptions {
  readonly bus: ModbusBus;
  readonly unit: number;
  readonly profile: "fenced" | "plain";
  readonly points: Readonly<Record<string, PointConfig>>;
}

type Table = PointConfig["table"];

interface ReadSpan {
  readonly table: Table;
  readonly start: number;
  readonly count: number;
  readonly points: readonly [string, PointConfig][];
}

/** Groups points into as few reads as possible: one per table while the span fits. */
export function planReads(points: Readonly<Record<string, PointConfig>>): ReadSpan[] {
  const spans: ReadSpan[] = [];
  for (const table of ["holding", "input"] as const) {
    const sorted = Object.entries(points)
      .filter(([, p]) => p.table === table)
      .sort(([, a], [, b]) => a.register - b.register);
    let current: [string, PointConfig][] = [];
    let start = 0;
    for (const entry of sorted) {
      const end = entry[1].register + registerSpan(entry[1]);
      if (current.length > 0 && end - start > MAX_READ_REGISTERS) {
        spans.push(span(table, start, current));
        current = [];
      }
      if (current.length === 0) start = entry[1].register;
      current.push(entry);
    }
    if (current.length > 0) spans.push(span(table, start, current));
  }
  return spans;
}

function span(table: Table, start: number, points: [string, PointConfig][]): ReadSpan {
  const end = Math.max(...points.map(([, p]) => p.register + registerSpan(p)));
  return { table, start, count: end - start, points };
}

function call<T>(fn: (cb: (err: Error | null, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))));
}

export class ModbusDevice implements DevicePort {
  private readonly reads: ReadSpan[];
  /** Writable points in configuration order: the command block's setpoint slots. */
  private readonly setpoints: [string, PointConfig][];
  private lastValues: PointValues = {};
  private writeCounter: { token: number; next: number } = { token: 0, next: 0 };

  constructor(private readonly options: DeviceOptions) {
    this.reads = planReads(options.points);
    this.setpoints = Object.entries(options.points).filter(([, p]) => p.writable);
  }

  private transact<T>(run: (client: ModbusClient) => Promise<T>): Promise<T> {
    return this.options.bus.transact(this.options.unit, run);
  }

  async read(): Promise<PointValues> {
    const { unit, profile } = this.options;
    // Reading the fenced device's keep-alive register would not feed its watchdog; a write does.
    if (profile === "fenced") await this.transact((c) => call((cb) => c.writeFC6(unit, FENCED.KEEPALIVE, 1, cb)));
    const values: Record<string, number> = {};
    for (const r of this.reads) {
      const result = await this.transact((c) => call<{ data: number[] }>((cb) => (r.table === "holding" ? c.writeFC3(unit, r.start, r.count, cb) : c.writeFC4(unit, r.start, r.count, cb))));
      for (const [name, point] of r.points) values[name] = decodePoint(point, result.data, point.register - r.start);
    }
    this.lastValues = values;
    return values;
  }

  async readFence(): Promise<Fence | null> {
    if (this.options.profile !== "fenced") return null;
    const { unit } = this.options;
    const result = await this.transact((c) => call<{ data: number[] }>((cb) => c.writeFC3(unit, FENCED.FENCE_START, FENCED.FENCE_COUNT, cb)));
    const fence = decodeFence(result.data);
    // Only the device's token is comparable with ours: its seq is our per-token write count.
    return { token: fence.token, seq: null };
  }

  async write(cmd: DeviceCommand): Promise<Outcome> {
    try {
      const applied = this.options.profile === "fenced" ? await this.writeFenced(cmd) : await this.writePlain(cmd);
      return { kind: "applied", applied };
    } catch (err) {
      return this.failure(err);
    }
  }

  private deviceSeqFor(token: number): number {
    if (this.writeCounter.token !== token) this.writeCounter = { token, next: 0 };
    return this.writeCounter.next++;
  }

  private async writeFenced(cmd: DeviceCommand): Promise<PointValues> {
    const seq = this.deviceSeqFor(cmd.token);
    if (seq > MAX_SEQ) throw new SeqExhaustedError();
    const applied: Record<string, number> = {};
    const regs = [...u64ToWords(BigInt(cmd.token)), ...u32ToWords(seq)];
    for (const [name, point] of this.setpoints) {
      // A setpoint the command leaves out keeps its current value (the block carries all).
      const value = cmd.set[name] ?? this.lastValues[name];
      if (value === undefined) throw new UnknownSetpointError(name);
      const words = encodePoint(point, value);
      regs.push(...words);
      applied[name] = decodePoint(point, words);
    }
    const { unit } = this.options;
    await this.transact((c) => call((cb) => c.writeFC16(unit, FENCED.COMMAND_START, regs, cb)));
    return Object.fromEntries(Object.keys(cmd.set).map((name) => [name, applied[name]!]));
  }

  private async writePlain(cmd: DeviceCommand): Promise<PointValues> {
    const { unit, points } = this.options;
    const applied: Record<string, number> = {};
    let written = 0;
    try {
      for (const [name, value] of Object.entries(cmd.set)) {
        const point = points[name]!;
        const words = encodePoint(point, value);
        await this.transact((c) => call((cb) => c.writeFC16(unit, point.register, words, cb)));
        applied[name] = decodePoint(point, words);
        written++;
      }
    } catch (err) {
      // Some points of a multi-point command may already be set: that is not "nothing happened".
      if (written > 0) throw new PartialWriteError(applied, err);
      throw err;
    }
    return applied;
  }

  private async failure(err: unknown): Promise<Outcome> {
    if (err instanceof LinkDownError || err instanceof BusBusyError) {
      return { kind: "failed", code: "DEVICE_UNAVAILABLE", message: `The command was not sent: ${err.message}.` };
    }
    if (err instanceof UnknownSetpointError || err instanceof SeqExhaustedError) {
      return { kind: "failed", code: "DEVICE_ERROR", message: err.message };
    }
    if (err instanceof PartialWriteError) {
      return { kind: "failed", code: "OUTCOME_UNKNOWN", message: `Only ${Object.keys(err.applied).join(", ")} of the command was confirmed before the device stopped answering; re-read state.` };
    }
    const modbusCode = modbusExceptionCode(err);
    if (modbusCode === FENCE_REFUSED_EXCEPTION && this.options.profile === "fenced") {
      return { kind: "failed", code: "DEVICE_REJECTED", message: `The device's own fence refused the write (${await this.refusalReason()}); a newer token reached it.`, modbusCode };
    }
    if (modbusCode !== undefined) {
      return { kind: "failed", code: "DEVICE_ERROR", message: `The device answered Modbus exception ${modbusCode}.`, modbusCode };
    }
    if (isTimeout(err)) {
      return { kind: "failed", code: "OUTCOME_UNKNOWN", message: "The device did not confirm the write in time; it may or may not have acted, so re-read state." };
    }
    return { kind: "failed", code: "OUTCOME_UNKNOWN", message: `The write failed after it may have been sent (${String(err)}); re-read state.` };
  }

  private async refusalReason(): Promise<string> {
    try {
      const { unit } = this.options;
      const result = await this.transact((c) => call<{ data: number[] }>((cb) => c.writeFC3(unit, FENCED.FENCE_START, FENCED.FENCE_COUNT, cb)));
      return refusalName(decodeFence(result.data).lastRefusalReason);
    } catch {
      return "reason unreadable";
    }
  }
}

class UnknownSetpointError extends Error {
  constructor(name: string) {
    super(`The command block needs a value for ${name}, and none has been read from the device yet; include it in set.`);
  }
}

class SeqExhaustedError extends Error {
  constructor() {
    super("This lease has sent 2^32 writes to the device; acquire a new lease.");
  }
}

class PartialWriteError extends Error {
  constructor(
    readonly applied: PointValues,
    cause: unknown,
  ) {
    super("partial write", { cause });
  }
}
