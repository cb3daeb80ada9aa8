/** Engineering values ↔ registers: a missing register is an error, never a 0. */
import { describe, expect, it } from "vitest";
import { decodePoint, encodePoint } from "../../../../src/adapters/modbus/codec.ts";
import type { PointConfig } from "../../../../src/config/schema.ts";

const point = (p: Partial<PointConfig>): PointConfig =>
  ({ register: 0, table: "holding", type: "u16", wordOrder: "big", scale: 1, writable: false, min: 0, max: 65_535, ...p }) as PointConfig;

describe("decodePoint", () => {
  it("decodes a scaled u16 without float noise", () => {
    expect(decodePoint(point({ scale: 0.01 }), [4250])).toBe(42.5);
  });

  it("throws when the register is missing instead of decoding 0", () => {
    expect(() => decodePoint(point({ scale: 0.1 }), [125], 1)).toThrow(/register 1 is missing from an answer of 1/);
    expect(() => decodePoint(point({ type: "u32" }), [0, 7, 1], 2)).toThrow(/register 3 is missing/);
  });

  it("returns an f32's NaN or infinity as it is, for the shell to report as a fault", () => {
    expect(decodePoint(point({ type: "f32" }), [0x7fc0, 0])).toBeNaN();
    expect(decodePoint(point({ type: "f32" }), [0x7f80, 0])).toBe(Number.POSITIVE_INFINITY);
  });

  it("round-trips through encodePoint", () => {
    const p = point({ type: "i32", scale: 0.001, wordOrder: "little", min: -1000, max: 1000 });
    expect(decodePoint(p, encodePoint(p, -123.456))).toBe(-123.456);
  });
});
