/**
 * The fencegate Modbus profiles: register maps and pure encoders/decoders.
 *
 * Two profiles:
 * - FENCED: the device itself keeps a fence `(token, seq)` and refuses a command block whose
 *   `(token, seq)` is not greater than the last one it accepted. The gateway's fence then has
 *   a second, independent line of defence at the device.
 * - PLAIN: an ordinary Modbus actuator (setpoint register, position register) that the
 *   gateway alone protects.
 *
 * All addresses are 0-based PDU addresses (mbpoll: use `-0`, or add 1). Every register of a
 * map is readable with FC03 (holding) and, as an alias of the same table, FC04 (input).
 * Multi-register integers use BIG-ENDIAN WORD ORDER: the most significant word at the lowest
 * address (mbpoll: `-B`). The file firmware-bridge/README.md is the normative description.
 */

// ---------------------------------------------------------------------------------------------
// Units and scaling

/** Positions are u16 in 0.01 % units: 0 = 0.00 %, 10000 = 100.00 %. */
export const POSITION_SCALE = 100;
export const POSITION_RAW_MAX = 10_000;
/** The largest token a fencegate token can be (the MQTT API's 2^53-1). The device stores 64 bits. */
export const MAX_TOKEN = Number.MAX_SAFE_INTEGER;
/** The device's seq is 32 bits wide. */
export const MAX_SEQ = 0xffff_ffff;

/** % → raw u16 (0.01 % units), rounding to the nearest unit. Throws RangeError outside 0..100. */
export function positionToRaw(percent: number): number {
  if (!Number.isFinite(percent) || percent < 0 || percent > 100) {
    throw new RangeError(`position ${percent} % is outside 0..100`);
  }
  return Math.round(percent * POSITION_SCALE);
}

/** raw u16 (0.01 % units) → %. */
export function rawToPosition(raw: number): number {
  return raw / POSITION_SCALE;
}

// ---------------------------------------------------------------------------------------------
// Exception and reason codes

/** Standard Modbus exception codes the devices use. */
export const EXCEPTION = {
  ILLEGAL_FUNCTION: 0x01,
  ILLEGAL_DATA_ADDRESS: 0x02,
  ILLEGAL_DATA_VALUE: 0x03,
  SERVER_DEVICE_FAILURE: 0x04,
} as const;

/**
 * The exception code of a FENCE refusal: 0x46 ('F'). Deliberately outside the standard table
 * (0x01..0x0B), so no generic device, gateway or master produces it for another reason: a
 * gateway that sees modbusCode 0x46 from a fenced device knows, from that one response, that
 * the device is alive, received the whole frame intact, and refused the fence. Nothing happened.
 * The reason is in {@link FENCED.LAST_REFUSAL_REASON}. See firmware-bridge/README.md "Why 0x46".
 */
export const FENCE_REFUSED_EXCEPTION = 0x46;

/** Values of the LAST_REFUSAL_REASON register. */
export const REFUSAL = {
  NONE: 0,
  /** token < stored fence token. Exception 0x46. */
  STALE_TOKEN: 1,
  /** token == stored token, seq < stored seq. Exception 0x46. */
  STALE_SEQ: 2,
  /** (token, seq) equal to the stored fence but other contents. Exception 0x46. */
  CONFLICT: 3,
  /** A setpoint out of range (position > 10000) or token 0. Exception 0x03. */
  INVALID_VALUE: 4,
  /** A write to the command block that is not one FC16 covering exactly the whole block. Exception 0x02. */
  PARTIAL_BLOCK: 5,
  /** The device could not persist the fence: nothing was acted on. Exception 0x04. */
  PERSIST_FAILED: 6,
} as const;
export type RefusalReason = (typeof REFUSAL)[keyof typeof REFUSAL];

export function refusalName(code: number): string {
  for (const [name, value] of Object.entries(REFUSAL)) if (value === code) return name;
  return `UNKNOWN_${code}`;
}

/** STATUS register bits (both profiles). */
export const STATUS = {
  /** actual position differs from the active target. */
  MOVING: 1 << 0,
  /** The communications-loss watchdog tripped: the device is at (or moving to) its safe position. */
  SAFE_STATE: 1 << 1,
  /** The device holds a fence (it has accepted a command block at least once). Fenced profile only. */
  FENCED: 1 << 2,
  /** At least one FAULTS bit is set. */
  FAULT: 1 << 3,
} as const;

/** FAULTS register bits. */
export const FAULT = {
  /** The last attempt to persist the fence failed. */
  PERSIST: 1 << 0,
} as const;

// ---------------------------------------------------------------------------------------------
// The fenced profile's register map

export const PROFILE_MAGIC = 0x4647; // "FG"
export const PROFILE_ID = { FENCED: 1, PLAIN: 2 } as const;
/** Profile version 1.1 as major << 8 | minor (1.1 added the FENCE_RAISE block). */
export const PROFILE_VERSION = 0x0101;
/** Version 1.0: no FENCE_RAISE block (a write there answers 0x02). */
export const PROFILE_VERSION_1_0 = 0x0100;
export const DEVICE_TYPE_REFERENCE_ACTUATOR = 0x0001;

/** Number of setpoint registers in the command block (the reference actuator: target position). */
export const COMMAND_SETPOINT_COUNT = 1;

export const FENCED = {
  // identity, read-only
  MAGIC: 0x0000,
  PROFILE_ID: 0x0001,
  PROFILE_VERSION: 0x0002,
  DEVICE_TYPE: 0x0003,
  FIRMWARE_VERSION: 0x0004,
  /** u32, 2 registers, big-endian words. */
  SERIAL_NUMBER: 0x0005,
  SETPOINT_COUNT: 0x0007,
  IDENTITY_START: 0x0000,
  IDENTITY_COUNT: 8,

  // fence, read-only
  /** u64, 4 registers, big-endian words. */
  FENCE_TOKEN: 0x0010,
  /** u32, 2 registers, big-endian words. */
  FENCE_SEQ: 0x0014,
  LAST_REFUSAL_REASON: 0x0016,
  /** u16 wrapping counter of refusals, so a reader can tell the reason belongs to a new refusal. */
  REFUSAL_COUNT: 0x0017,
  FENCE_START: 0x0010,
  FENCE_COUNT: 8,

  // live readings, read-only
  /** The active target (the accepted setpoint, or the safe position in safe state), 0.01 %. */
  TARGET_POSITION: 0x0020,
  ACTUAL_POSITION: 0x0021,
  STATUS: 0x0022,
  FAULTS: 0x0023,
  /** u16 wrapping count of command blocks acted on (duplicates do not count). */
  APPLIED_COUNT: 0x0024,
  LIVE_START: 0x0020,
  LIVE_COUNT: 5,

  // configuration, read-only over Modbus (set at commissioning)
  /** Communications-loss watchdog timeout in ms, 0 = disabled. */
  WATCHDOG_MS: 0x0030,
  SAFE_POSITION: 0x0031,
  /** Travel rate in 0.01 %/s. */
  RATE: 0x0032,
  CONFIG_START: 0x0030,
  CONFIG_COUNT: 3,

  /** Write any value (FC06, or FC16 of count 1) to feed the watchdog. Reads 0. */
  KEEPALIVE: 0x0038,

  /** The command block: token u64 (4), seq u32 (2), target position (1). One FC16, exactly. */
  COMMAND_START: 0x0040,
  COMMAND_COUNT: 4 + 2 + COMMAND_SETPOINT_COUNT,
  COMMAND_TOKEN: 0x0040,
  COMMAND_SEQ: 0x0044,
  COMMAND_TARGET_POSITION: 0x0046,

  /**
   * Profile 1.1: raise the fence without moving anything: token u64 (4), seq u32 (2). One
   * FC16, exactly. The new active gateway of a group writes it at takeover. Reads 0.
   */
  FENCE_RAISE_START: 0x0048,
  FENCE_RAISE_COUNT: 6,

  /** One FC03 read for the gateway's read-back: fence + live readings (0x0010..0x0024). */
  READBACK_START: 0x0010,
  READBACK_COUNT: 0x0025 - 0x0010,

  /** Readable range: 0x0000 .. MAP_END-1; gaps read as 0. */
  MAP_END: 0x004e,
  /** Profile 1.0's readable range (it ends with the command block). */
  MAP_END_1_0: 0x0047,
} as const;

// ---------------------------------------------------------------------------------------------
// The plain profile's register map

export const PLAIN = {
  /** Holding, read/write (FC06 or FC16): target position, 0.01 %. */
  TARGET_POSITION: 0x0000,
  /** Read-only (FC03 or FC04): actual position, 0.01 %. */
  ACTUAL_POSITION: 0x0001,
  /** Read-only: STATUS bits (MOVING, SAFE_STATE). */
  STATUS: 0x0002,
  READ_START: 0x0000,
  READ_COUNT: 3,
  MAP_END: 0x0003,
} as const;

// ---------------------------------------------------------------------------------------------
// Encoders and decoders

export interface ReferenceSetpoints {
  /** Target position in % (0..100), sent in 0.01 % units. */
  readonly position: number;
}

export interface CommandBlock {
  readonly token: number;
  readonly seq: number;
  readonly setpoints: ReferenceSetpoints;
}

function checkUint(name: string, value: number, max: number, min = 0): void {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} ${value} is not an integer in ${min}..${max}`);
  }
}

/** A u64 (as bigint) → 4 registers, most significant word first. */
export function u64ToWords(value: bigint): number[] {
  return [48n, 32n, 16n, 0n].map((shift) => Number((value >> shift) & 0xffffn));
}

/** 4 registers, most significant word first → u64 as bigint. */
export function wordsToU64(words: readonly number[], at = 0): bigint {
  let v = 0n;
  for (let i = 0; i < 4; i++) v = (v << 16n) | BigInt(word(words, at + i));
  return v;
}

export function u32ToWords(value: number): number[] {
  return [Math.floor(value / 0x10000) & 0xffff, value & 0xffff];
}

export function wordsToU32(words: readonly number[], at = 0): number {
  return word(words, at) * 0x10000 + word(words, at + 1);
}

function word(words: readonly number[], i: number): number {
  const w = words[i];
  if (w === undefined) throw new RangeError(`register ${i} missing (got ${words.length})`);
  return w & 0xffff;
}

/**
 * The 7 registers of one fenced command block, to be written with ONE FC16 at
 * FENCED.COMMAND_START. token 1..2^53-1 (no precision loss: encoded through BigInt),
 * seq 0..2^32-1, position 0..100 % (rounded to 0.01 %). Throws RangeError otherwise.
 */
export function encodeCommandBlock(block: CommandBlock): number[] {
  checkUint("token", block.token, MAX_TOKEN, 1);
  checkUint("seq", block.seq, MAX_SEQ);
  return [...u64ToWords(BigInt(block.token)), ...u32ToWords(block.seq), positionToRaw(block.setpoints.position)];
}

/** The 6 registers of a fence raise (profile 1.1), to be written with ONE FC16 at FENCED.FENCE_RAISE_START. */
export function encodeFenceRaise(token: number, seq: number): number[] {
  checkUint("token", token, MAX_TOKEN, 1);
  checkUint("seq", seq, MAX_SEQ);
  return [...u64ToWords(BigInt(token)), ...u32ToWords(seq)];
}

/** The command block's registers → its fields. The token as bigint (the device's view). */
export function decodeCommandBlockRaw(regs: readonly number[]): { token: bigint; seq: number; targetRaw: number } {
  return { token: wordsToU64(regs, 0), seq: wordsToU32(regs, 4), targetRaw: word(regs, 6) };
}

/** The command block's registers (e.g. an FC03 read of COMMAND_START) → a CommandBlock. */
export function decodeCommandBlock(regs: readonly number[]): CommandBlock {
  const raw = decodeCommandBlockRaw(regs);
  return { token: tokenToNumber(raw.token), seq: raw.seq, setpoints: { position: rawToPosition(raw.targetRaw) } };
}

function tokenToNumber(token: bigint): number {
  if (token > BigInt(MAX_TOKEN)) throw new RangeError(`device token ${token} exceeds 2^53-1`);
  return Number(token);
}

export interface DeviceFence {
  /** 0 when the device never accepted a command block. */
  readonly token: number;
  readonly seq: number;
  readonly lastRefusalReason: number;
  readonly refusalCount: number;
}

/** FENCE_COUNT registers read at FENCE_START → the device's fence. */
export function decodeFence(regs: readonly number[]): DeviceFence {
  return {
    token: tokenToNumber(wordsToU64(regs, 0)),
    seq: wordsToU32(regs, 4),
    lastRefusalReason: word(regs, 6),
    refusalCount: word(regs, 7),
  };
}

export interface Readings {
  /** Active target in %. */
  readonly targetPosition: number;
  readonly actualPosition: number;
  readonly moving: boolean;
  readonly safeState: boolean;
  readonly status: number;
  readonly faults: number;
}

export interface FencedReadings extends Readings {
  readonly appliedCount: number;
}

function readings(target: number, actual: number, status: number, faults: number): Readings {
  return {
    targetPosition: rawToPosition(target),
    actualPosition: rawToPosition(actual),
    moving: (status & STATUS.MOVING) !== 0,
    safeState: (status & STATUS.SAFE_STATE) !== 0,
    status,
    faults,
  };
}

/** LIVE_COUNT registers read at LIVE_START → readings. */
export function decodeFencedReadings(regs: readonly number[]): FencedReadings {
  return { ...readings(word(regs, 0), word(regs, 1), word(regs, 2), word(regs, 3)), appliedCount: word(regs, 4) };
}

/** READBACK_COUNT registers read at READBACK_START → fence and readings in one go. */
export function decodeReadback(regs: readonly number[]): { fence: DeviceFence; readings: FencedReadings } {
  const off = FENCED.LIVE_START - FENCED.READBACK_START;
  return { fence: decodeFence(regs.slice(0, FENCED.FENCE_COUNT)), readings: decodeFencedReadings(regs.slice(off)) };
}

export interface Identity {
  readonly magic: number;
  readonly profileId: number;
  readonly profileVersion: number;
  readonly deviceType: number;
  readonly firmwareVersion: number;
  readonly serialNumber: number;
  readonly setpointCount: number;
}

/** IDENTITY_COUNT registers read at IDENTITY_START → identity. Check `magic === PROFILE_MAGIC`. */
export function decodeIdentity(regs: readonly number[]): Identity {
  return {
    magic: word(regs, 0),
    profileId: word(regs, 1),
    profileVersion: word(regs, 2),
    deviceType: word(regs, 3),
    firmwareVersion: word(regs, 4),
    serialNumber: wordsToU32(regs, 5),
    setpointCount: word(regs, 7),
  };
}

/** Plain profile: the value to write (FC06) at PLAIN.TARGET_POSITION. */
export function encodePlainSetpoint(setpoints: ReferenceSetpoints): number {
  return positionToRaw(setpoints.position);
}

/** Plain profile: READ_COUNT registers read at READ_START → readings. */
export function decodePlainReadings(regs: readonly number[]): Readings {
  return readings(word(regs, 0), word(regs, 1), word(regs, 2), 0);
}

/** Lexicographic order of (token, seq) pairs: negative, 0 or positive. */
export function compareFence(a: { token: bigint; seq: number }, b: { token: bigint; seq: number }): number {
  if (a.token !== b.token) return a.token < b.token ? -1 : 1;
  return a.seq - b.seq;
}
