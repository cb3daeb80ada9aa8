import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { RtuFramer } from "../src/rtu-framer.ts";
import { charsMs, crc16, expectedRequestLength, hasValidCrc, t35Ms, transactionLimitMs, withCrc } from "../../packages/protocol/src/rtu.ts";

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ""), "hex");

describe("CRC-16/MODBUS", () => {
  it("matches the catalogue check value for '123456789' (0x4B37)", () => {
    expect(crc16(Buffer.from("123456789", "ascii"))).toBe(0x4b37);
  });

  it("matches the spec examples: read holding 01 03 0000 000A → C5 CD, write 01 06 0001 0003 → 98 0B", () => {
    expect(withCrc(hex("01 03 00 00 00 0A")).toString("hex")).toBe("01030000000ac5cd");
    expect(withCrc(hex("01 06 00 01 00 03")).toString("hex")).toBe("010600010003980b");
  });

  it("hasValidCrc accepts a good frame and rejects one flipped bit and too-short input", () => {
    const good = hex("01 03 00 00 00 0A C5 CD");
    expect(hasValidCrc(good)).toBe(true);
    const bad = Buffer.from(good);
    bad[3] = (bad[3] ?? 0) ^ 0x01;
    expect(hasValidCrc(bad)).toBe(false);
    expect(hasValidCrc(hex("01 03 C5"))).toBe(false);
  });
});

describe("RTU timing", () => {
  it("fixes t3.5 at 1.75 ms above 19200 baud and computes it from the character time below", () => {
    expect(t35Ms(115200)).toBe(1.75);
    expect(t35Ms(9600)).toBeCloseTo((3.5 * 11 * 1000) / 9600, 9);
  });

  it("gives the field notes' limits: FC06 at 115200 ≈ 5.03 ms, at 9600 ≈ 26.4 ms", () => {
    expect(transactionLimitMs(8, 8, 115200)).toBeCloseTo(5.028, 2);
    expect(transactionLimitMs(8, 8, 9600)).toBeCloseTo(26.4, 1);
    expect(charsMs(29, 115200)).toBeCloseTo(2.769, 2);
  });
});

describe("expected request length", () => {
  it("knows FC01..06 are 8 bytes and FC15/16 are 9 + byte count, once the byte count arrived", () => {
    expect(expectedRequestLength(hex("01"))).toBeUndefined();
    expect(expectedRequestLength(hex("01 03"))).toBe(8);
    expect(expectedRequestLength(hex("01 10 00 40 00"))).toBeUndefined();
    expect(expectedRequestLength(hex("01 10 00 40 00 07 0E"))).toBe(23);
    expect(expectedRequestLength(hex("01 2B 0E 01"))).toBeNull();
  });
});

describe("RtuFramer", () => {
  let frames: string[];
  let drops: string[];
  let framer: RtuFramer;
  beforeEach(() => {
    vi.useFakeTimers();
    frames = [];
    drops = [];
    framer = new RtuFramer({
      silenceMs: 3,
      onFrame: (f) => frames.push(f.toString("hex")),
      onDrop: (b, why) => drops.push(`${why}:${b.toString("hex")}`),
    });
  });
  afterEach(() => {
    framer.close();
    vi.useRealTimers();
  });

  it("hands over a frame split across chunks as soon as its length is complete, before the silence", () => {
    const f = withCrc(hex("01 10 00 40 00 07 0E 0000 0000 0000 0005 0000 0001 1388"));
    framer.push(f.subarray(0, 3));
    framer.push(f.subarray(3, 10));
    expect(frames).toEqual([]);
    framer.push(f.subarray(10));
    expect(frames).toEqual([f.toString("hex")]);
  });

  it("splits two frames that arrive in one chunk", () => {
    const a = withCrc(hex("01 03 00 00 00 08"));
    const b = withCrc(hex("02 06 00 38 00 01"));
    framer.push(Buffer.concat([a, b]));
    expect(frames).toEqual([a.toString("hex"), b.toString("hex")]);
  });

  it("drops a frame with a bad CRC at the silence and frames the next one cleanly", () => {
    const bad = withCrc(hex("01 03 00 00 00 08"));
    bad[7] = (bad[7] ?? 0) ^ 0xff;
    framer.push(bad);
    expect(frames).toEqual([]);
    vi.advanceTimersByTime(3);
    expect(drops).toEqual([`crc:${bad.toString("hex")}`]);
    const good = withCrc(hex("01 03 00 00 00 08"));
    framer.push(good);
    expect(frames).toEqual([good.toString("hex")]);
  });

  it("keeps discarding bytes that follow a bad frame until the line is silent", () => {
    const bad = Buffer.from(withCrc(hex("01 03 00 00 00 08")));
    bad[2] = 0x7f;
    framer.push(bad);
    framer.push(withCrc(hex("01 03 00 00 00 08"))); // no silence in between: one garbled burst
    vi.advanceTimersByTime(3);
    expect(frames).toEqual([]);
    expect(drops).toHaveLength(1);
  });

  it("drops a truncated frame at the silence", () => {
    framer.push(hex("01 03 00 00"));
    vi.advanceTimersByTime(3);
    expect(frames).toEqual([]);
    expect(drops).toEqual(["short:01030000"]);
  });

  it("frames an unsupported function code by silence alone, if its CRC is valid", () => {
    const f = withCrc(hex("01 2B 0E 01 00"));
    framer.push(f);
    expect(frames).toEqual([]);
    vi.advanceTimersByTime(3);
    expect(frames).toEqual([f.toString("hex")]);
  });
});
