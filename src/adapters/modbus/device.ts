/**
 * An actuator on a Modbus bus, as the shell's {@link DevicePort}: reads its points, writes
 * commands, and (fenced profile) reads its own fence.
 *
 * Fenced profile: a command is ONE FC16 to the command block carrying token, seq and every
 * setpoint, so the device checks the fence in the same transaction that moves it. The
 * device's seq is 32 bits while the API's is 53, so the seq sent is this gateway's count of
 * writes under the token (0, 1, 2, ...): it rises exactly when accepted (token, seq) rise,
 * and it needs no durability because no token outlives a gateway restart (every lease
 * ends on restart and the next grant is higher). The setpoints a command leaves out carry
 * the last value commanded (and confirmed) or read back, and only one valid for the point;
 * one not known in this session is read first. Nothing is written, not even a keep-alive,
 * before the device's identity block says it speaks the fenced profile with as many
 * setpoint registers as configured; it is read again whenever the device may have changed
 * (the link reopened, the unit went silent).
 *
 * Plain profile: each point is written at its register, with FC16, or with FC06 for a
 * one-register point when `writeFunction` is fc06; the gateway is the only arbiter, so
 * nothing may write to such a device except through the gateway.
 *
 * On the bus, `read` is a poll; everything else (a command and the reads it needs first, the
 * fence read and raise that leases wait for) is a command, and goes ahead of waiting polls.
 */
import {
  EXCEPTION,
  FENCED,
  FENCE_REFUSED_EXCEPTION,
  MAX_SEQ,
  PROFILE_ID,
  PROFILE_MAGIC,
  PROFILE_VERSION,
  decodeFence,
  decodeIdentity,
  encodeFenceRaise,
  refusalName,
  u32ToWords,
  u64ToWords,
} from "../../../packages/protocol/src/modbus-profile.ts";
import type { Fence, Outcome, PointValues } from "../../core/types.ts";
import { DeviceAnswerError, DeviceMismatchError, type DeviceCommand, type DevicePort, type FenceRaise } from "../../shell/ports.ts";
import { BusBusyError, LinkDownError, isTimeout, modbusExceptionCode, type ModbusBus, type ModbusClient } from "./bus.ts";
import type { TransactionClass } from "./bus-queue.ts";
import { decodePoint, encodePoint, registerSpan, type PointMapping } from "./codec.ts";
import { describeException, exceptionOutcome, hex } from "./exceptions.ts";

/** A Modbus read may carry at most 125 registers. */
const MAX_READ_REGISTERS = 125;

export interface DeviceOptions {
  readonly bus: ModbusBus;
  readonly unit: number;
  readonly profile: "fenced" | "plain";
  readonly points: Readonly<Record<string, PointMapping>>;
  /** Plain profile: fc06 writes one-register points with FC06 (a device without FC16); default fc16. */
  readonly writeFunction?: "fc16" | "fc06";
}

type Table = PointMapping["table"];

interface ReadSpan {
  readonly table: Table;
  readonly start: number;
  readonly count: number;
  readonly points: readonly [string, PointMapping][];
}

/** Groups points into as few reads as possible: one per table while the span fits. */
function planReads(points: Readonly<Record<string, PointMapping>>): ReadSpan[] {
  const spans: ReadSpan[] = [];
  for (const table of ["holding", "input"] as const) {
    const sorted = Object.entries(points)
      .filter(([, p]) => p.table === table)
      .sort(([, a], [, b]) => a.register - b.register);
    let current: [string, PointMapping][] = [];
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

function span(table: Table, start: number, points: [string, PointMapping][]): ReadSpan {
  const end = Math.max(...points.map(([, p]) => p.register + registerSpan(p)));
  return { table, start, count: end - start, points };
}

function call<T>(fn: (cb: (err: Error | null, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))));
}

export class ModbusDevice implements DevicePort {
  private readonly reads: ReadSpan[];
  /** Writable points in configuration order: the command block's setpoint slots. */
  private readonly setpoints: [string, PointMapping][];
  /** Fenced: per setpoint, the last value commanded and confirmed, or read back, if valid for the point. */
  private known = new Map<string, number>();
  /** The bus session `known` belongs to; a new session starts empty. */
  private knownSession = -1;
  /** The last reading of a setpoint that is not valid for it (NaN, out of range): why it is not known. */
  private readonly invalid = new Map<string, number>();
  /** The bus session in which the fenced identity block last checked out. */
  private identitySession: number | null = null;
  private writeCounter: { token: number; next: number } = { token: 0, next: 0 };

  constructor(private readonly options: DeviceOptions) {
    this.reads = planReads(options.points);
    this.setpoints = Object.entries(options.points).filter(([, p]) => p.writable);
  }

  private transact<T>(kind: TransactionClass, run: (client: ModbusClient) => Promise<T>): Promise<T> {
    return this.options.bus.transact(this.options.unit, kind, run);
  }

  private session(): number {
    return this.options.bus.session(this.options.unit);
  }

  async read(): Promise<PointValues> {
    const { unit, profile } = this.options;
    if (profile === "fenced") {
      await this.checkIdentity("poll");
      // Reading the fenced device's keep-alive register would not feed its watchdog; a write does.
      await this.transact("poll", (c) => call((cb) => c.writeFC6(unit, FENCED.KEEPALIVE, 1, cb)));
    }
    const values: Record<string, number> = {};
    for (const r of this.reads) Object.assign(values, await this.readSpan(r, "poll"));
    return values;
  }

  async readFence(): Promise<Fence | null> {
    if (this.options.profile !== "fenced") return null;
    await this.checkIdentity("command");
    const fence = decodeFence(await this.readRegisters("command", "holding", FENCED.FENCE_START, FENCED.FENCE_COUNT));
    // Only the device's token is comparable with ours: its seq is our per-token write count.
    return { token: fence.token, seq: null };
  }

  async raiseFence(token: number): Promise<FenceRaise> {
    const { unit, profile } = this.options;
    if (profile !== "fenced") return { kind: "unsupported", message: "A plain device keeps no fence of its own." };
    try {
      await this.checkIdentity("command");
      // The next device seq under the token, like a command's: the gateway's own safe write
      // may have gone out under it already (the raise then sits above it).
      const seq = this.deviceSeqFor(token);
      await this.transact("command", (c) => call((cb) => c.writeFC16(unit, FENCED.FENCE_RAISE_START, encodeFenceRaise(token, seq), cb)));
      return { kind: "raised" };
    } catch (err) {
      const modbusCode = modbusExceptionCode(err);
      if (modbusCode === FENCE_REFUSED_EXCEPTION)
        return {
          kind: "refused",
          message: `The device refused fence ${token} (${await this.refusalReason()}): it holds a newer token, so another gateway has taken over.`,
        };
      if (modbusCode === EXCEPTION.ILLEGAL_DATA_ADDRESS) {
        return {
          kind: "unsupported",
          message:
            "The device answered exception 2 to FENCE_RAISE: it implements fenced profile 1.0, and a gateway group needs 1.1 (firmware-bridge/README.md).",
        };
      }
      return {
        kind: "failed",
        message: `The fence raise was not confirmed: ${modbusCode !== undefined ? describeException(modbusCode) : err instanceof Error ? err.message : String(err)}.`,
      };
    }
  }

  async write(cmd: DeviceCommand): Promise<Outcome> {
    try {
      const applied = this.options.profile === "fenced" ? await this.writeFenced(cmd) : await this.writePlain(cmd);
      return { kind: "applied", applied };
    } catch (err) {
      const outcome = await this.failure(err);
      // It may have landed or not: what the device holds for these setpoints is unknown now.
      if (outcome.code === "OUTCOME_UNKNOWN") for (const name of Object.keys(cmd.set)) this.known.delete(name);
      return outcome;
    }
  }

  /** One read of a span: its points' values, and what they say about the setpoints in it. */
  private async readSpan(r: ReadSpan, kind: TransactionClass): Promise<PointValues> {
    const data = await this.readRegisters(kind, r.table, r.start, r.count);
    const values: Record<string, number> = {};
    const known = this.knownSetpoints();
    for (const [name, point] of r.points) {
      const value = decodePoint(point, data, point.register - r.start);
      values[name] = value;
      if (!point.writable) continue;
      if (validFor(point, value)) {
        known.set(name, value);
        this.invalid.delete(name);
      } else {
        known.delete(name);
        this.invalid.set(name, value);
      }
    }
    return values;
  }

  private async readRegisters(kind: TransactionClass, table: PointMapping["table"], start: number, count: number): Promise<number[]> {
    const { unit } = this.options;
    try {
      const result = await this.transact(kind, (c) =>
        call<{ data: number[] }>((cb) => (table === "holding" ? c.writeFC3(unit, start, count, cb) : c.writeFC4(unit, start, count, cb))),
      );
      return result.data;
    } catch (err) {
      const code = modbusExceptionCode(err);
      if (code === undefined) throw err;
      throw new ReadExceptionError(
        code,
        `unit ${unit} answered a read of ${count} ${table} register(s) at ${start} with ${describeException(code)}; check the points' registers and table`,
      );
    }
  }

  private knownSetpoints(): Map<string, number> {
    const session = this.session();
    if (this.knownSession !== session) {
      this.known = new Map();
      this.knownSession = session;
    }
    return this.known;
  }

  /**
   * Fenced profile: the identity block must say fenced profile 1.x with as many setpoint
   * registers as the configuration's writable points take, once per bus session (a device
   * that does not is checked again on every call, so a corrected one is taken up).
   */
  private async checkIdentity(kind: TransactionClass): Promise<void> {
    const session = this.session();
    if (this.identitySession === session) return;
    const mismatch = (problem: string) =>
      new DeviceMismatchError(
        `Unit ${this.options.unit} is not the fenced device configured: ${problem}. Nothing is written to it and no lease is granted until it identifies right.`,
      );
    let regs: number[];
    try {
      regs = await this.readRegisters(kind, "holding", FENCED.IDENTITY_START, FENCED.IDENTITY_COUNT);
    } catch (err) {
      // A fenced device answers reads of its whole map: an exception here says it is something else.
      if (err instanceof ReadExceptionError)
        throw mismatch(`it answers a read of the identity block (registers 0-7) with ${describeException(err.code)}`);
      throw err;
    }
    const identity = decodeIdentity(regs);
    const registers = this.setpoints.reduce((n, [, p]) => n + registerSpan(p), 0);
    let problem: string | null = null;
    if (identity.magic !== PROFILE_MAGIC) {
      problem = `register 0 reads ${hex(identity.magic, 4)}, not the fencegate magic ${hex(PROFILE_MAGIC, 4)}: it has no fenced identity block (a plain device needs profile: plain)`;
    } else if (identity.profileId !== PROFILE_ID.FENCED) {
      problem = `it identifies as fencegate profile ${identity.profileId}, not the fenced profile (${PROFILE_ID.FENCED})`;
    } else if (identity.profileVersion >> 8 !== PROFILE_VERSION >> 8) {
      problem = `it speaks fenced profile version ${identity.profileVersion >> 8}.${identity.profileVersion & 0xff}; this gateway speaks ${PROFILE_VERSION >> 8}.x`;
    } else if (identity.setpointCount !== registers) {
      problem = `its command block has ${identity.setpointCount} setpoint registers where the configuration's writable points take ${registers}`;
    }
    if (problem !== null) throw mismatch(problem);
    this.identitySession = session;
  }

  private deviceSeqFor(token: number): number {
    if (this.writeCounter.token !== token) this.writeCounter = { token, next: 0 };
    return this.writeCounter.next++;
  }

  private async writeFenced(cmd: DeviceCommand): Promise<PointValues> {
    await notSent("checking the device's identity", () => this.checkIdentity("command"));
    const unknown = this.setpoints.filter(([name]) => cmd.set[name] === undefined && !this.knownSetpoints().has(name));
    if (unknown.length > 0) {
      await notSent("reading the setpoints the command leaves out", async () => {
        for (const r of planReads(Object.fromEntries(unknown))) await this.readSpan(r, "command");
      });
    }
    const known = this.knownSetpoints();
    const applied: Record<string, number> = {};
    const words: number[] = [];
    for (const [name, point] of this.setpoints) {
      // A setpoint the command leaves out keeps its value (the block carries all).
      const value = cmd.set[name] ?? known.get(name);
      if (value === undefined) throw new UnknownSetpointError(name, point, this.invalid.get(name));
      const encoded = encodePoint(point, value);
      words.push(...encoded);
      applied[name] = decodePoint(point, encoded);
    }
    const seq = this.deviceSeqFor(cmd.token);
    if (seq > MAX_SEQ) throw new SeqExhaustedError();
    const { unit } = this.options;
    await this.transact("command", (c) =>
      call((cb) => c.writeFC16(unit, FENCED.COMMAND_START, [...u64ToWords(BigInt(cmd.token)), ...u32ToWords(seq), ...words], cb)),
    );
    for (const [name] of this.setpoints) known.set(name, applied[name]!);
    return Object.fromEntries(Object.keys(cmd.set).map((name) => [name, applied[name]!]));
  }

  private async writePlain(cmd: DeviceCommand): Promise<PointValues> {
    const { unit, points, writeFunction } = this.options;
    const applied: Record<string, number> = {};
    let written = 0;
    try {
      for (const [name, value] of Object.entries(cmd.set)) {
        const point = points[name]!;
        const words = encodePoint(point, value);
        if (words.length === 1 && writeFunction === "fc06")
          await this.transact("command", (c) => call((cb) => c.writeFC6(unit, point.register, words[0]!, cb)));
        else await this.transact("command", (c) => call((cb) => c.writeFC16(unit, point.register, words, cb)));
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

  private async failure(err: unknown): Promise<Extract<Outcome, { kind: "failed" }>> {
    if (err instanceof LinkDownError || err instanceof BusBusyError || err instanceof NotSentError) {
      return { kind: "failed", code: "DEVICE_UNAVAILABLE", message: `The command was not sent: ${err.message}.` };
    }
    if (err instanceof UnknownSetpointError || err instanceof SeqExhaustedError) {
      return { kind: "failed", code: "DEVICE_ERROR", message: err.message };
    }
    if (err instanceof PartialWriteError) {
      return {
        kind: "failed",
        code: "OUTCOME_UNKNOWN",
        message: `Only ${Object.keys(err.applied).join(", ")} of the command was confirmed before the device stopped answering; re-read state.`,
      };
    }
    const modbusCode = modbusExceptionCode(err);
    if (modbusCode !== undefined) {
      const { code, message } = exceptionOutcome(modbusCode, this.options.profile === "fenced");
      if (code === "DEVICE_REJECTED") {
        return {
          kind: "failed",
          code,
          message: `The device's own fence refused the write (${await this.refusalReason()}); a newer token reached it.`,
          modbusCode,
        };
      }
      return { kind: "failed", code, message, modbusCode };
    }
    if (isTimeout(err)) {
      return {
        kind: "failed",
        code: "OUTCOME_UNKNOWN",
        message: `The device did not confirm the write in time (${String((err as Error).message)}); it may or may not have acted, so re-read state.`,
      };
    }
    if (err instanceof DeviceAnswerError) {
      return {
        kind: "failed",
        code: "OUTCOME_UNKNOWN",
        message: `The device's answer to the write was malformed (${err.message}); it may or may not have acted, so re-read state.`,
      };
    }
    return {
      kind: "failed",
      code: "OUTCOME_UNKNOWN",
      message: `The write failed after it may have been sent (${String(err)}); re-read state.`,
    };
  }

  private async refusalReason(): Promise<string> {
    try {
      return refusalName(
        decodeFence(await this.readRegisters("command", "holding", FENCED.FENCE_START, FENCED.FENCE_COUNT)).lastRefusalReason,
      );
    } catch {
      return "reason unreadable";
    }
  }
}

function validFor(point: PointMapping, value: number): boolean {
  return Number.isFinite(value) && value >= point.min && value <= point.max;
}

/** Runs a step that comes before the write: if it fails, the command never reached the device. */
async function notSent<T>(what: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    if (err instanceof DeviceMismatchError) throw new NotSentError(err.message.replace(/\.$/, ""), { cause: err });
    throw new NotSentError(`${what} failed (${err instanceof Error ? err.message : String(err)})`, { cause: err });
  }
}

/** The device answered a read with a Modbus exception. */
class ReadExceptionError extends DeviceAnswerError {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** The command never left: a step before the write failed. */
class NotSentError extends Error {}

class UnknownSetpointError extends Error {
  constructor(name: string, point: PointMapping, reading: number | undefined) {
    const read =
      reading === undefined
        ? "none has been read from the device"
        : `the device's ${name} reads ${reading}, which is not a valid value for it (${point.min}..${point.max})`;
    super(`The command block must carry every setpoint and ${read}, so nothing was sent; include ${name} in set.`);
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
