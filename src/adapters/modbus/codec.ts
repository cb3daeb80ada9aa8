/** Engineering values ↔ Modbus registers, as a point's mapping describes them. */

/** The register types a point may have. */
export const POINT_TYPES = ["u16", "i16", "u32", "i32", "f32"] as const;
export type PointType = (typeof POINT_TYPES)[number];

/**
 * Where and how a point sits in a device's registers, in engineering units: what a
 * configuration's `points.<name>` says (src/config/schema.ts), defaults filled in.
 */
export interface PointMapping {
  /** 0-based register address (as on the wire). */
  readonly register: number;
  readonly table: "holding" | "input";
  readonly type: PointType;
  /** For 32-bit types: which register holds the high word. "big": the first. */
  readonly wordOrder: "big" | "little";
  /** value = raw * scale. */
  readonly scale: number;
  /** Limits in engineering units (unless configured, what the type and scale can represent). */
  readonly min: number;
  readonly max: number;
  readonly writable: boolean;
}

const view = new DataView(new ArrayBuffer(4));

function words32(hi: number, lo: number, order: PointMapping["wordOrder"]): [number, number] {
  return order === "big" ? [hi, lo] : [lo, hi];
}

/** The registers that carry `value` (engineering units). Rounds to the point's resolution. */
export function encodePoint(point: PointMapping, value: number): number[] {
  if (point.type === "f32") {
    view.setFloat32(0, value);
    return words32(view.getUint16(0), view.getUint16(2), point.wordOrder);
  }
  const raw = Math.round(value / point.scale);
  switch (point.type) {
    case "u16":
      return [raw & 0xffff];
    case "i16":
      return [raw & 0xffff];
    case "u32":
    case "i32":
      view.setUint32(0, raw >>> 0);
      return words32(view.getUint16(0), view.getUint16(2), point.wordOrder);
  }
}

/**
 * The engineering value held in `regs` starting at `at`. Throws when a register is
 * missing: an answer shorter than asked for never decodes (as 0 or anything else). An f32
 * register pair may hold NaN or an infinity; it is returned as it is, for the caller to
 * report as a fault.
 */
export function decodePoint(point: PointMapping, regs: readonly number[], at = 0): number {
  const first = register(regs, at);
  if (point.type === "u16") return tidy(first * point.scale);
  if (point.type === "i16") return tidy(((first << 16) >> 16) * point.scale);
  const [hi, lo] = words32(first, register(regs, at + 1), point.wordOrder);
  view.setUint16(0, hi);
  view.setUint16(2, lo);
  if (point.type === "f32") return view.getFloat32(0);
  const raw = point.type === "u32" ? view.getUint32(0) : view.getInt32(0);
  return tidy(raw * point.scale);
}

function register(regs: readonly number[], at: number): number {
  const r = regs[at];
  if (r === undefined) throw new RangeError(`register ${at} is missing from an answer of ${regs.length}`);
  return r;
}

/** Removes binary float noise from scaling, so 4250 × 0.01 reads 42.5. */
function tidy(x: number): number {
  return Number.parseFloat(x.toPrecision(12));
}

export function registerSpan(point: PointMapping): number {
  return point.type === "u16" || point.type === "i16" ? 1 : 2;
}
