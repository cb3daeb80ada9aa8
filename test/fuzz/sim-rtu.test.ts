/**
 * Fuzzing the simulator's RTU request side (firmware-bridge: RtuFramer + Station, the
 * fenced reference device behind them) with byte streams: valid requests split at random
 * points, back to back or separated by silences, interleaved with line noise, requests with
 * a flipped bit or a broken CRC, truncated ones, requests for another unit.
 *
 * Never a crash; never a state change from an invalid frame; every valid frame is still
 * processed, exactly as a device fed the valid frames alone (the model) processes them.
 */
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { MemoryEeprom, type DeviceConfig } from "../../firmware-bridge/src/device.ts";
import { FENCED, u32ToWords, u64ToWords } from "../../packages/protocol/src/modbus-profile.ts";
import { RtuFramer } from "../../firmware-bridge/src/rtu-framer.ts";
import { hasValidCrc, withCrc } from "../../packages/protocol/src/rtu.ts";
import { Station, type Reply } from "../../firmware-bridge/src/station.ts";
import { FUZZ_TIMEOUT_MS, runs } from "./runs.ts";

const SILENCE_MS = 3;
const CONFIG: DeviceConfig = { unit: 1, profile: "fenced", watchdogMs: 0, safePositionRaw: 0, rateRawPerS: 0 };
const u16 = (n: number) => [(n >> 8) & 0xff, n & 0xff];
const words = (ws: readonly number[]) => ws.flatMap(u16);

/** A device behind a framer, recording what it answered. */
function rig() {
  const station = new Station([CONFIG], new MemoryEeprom(), () => 0);
  const replies: (Reply | null)[] = [];
  const delivered: Buffer[] = [];
  const framer = new RtuFramer({
    silenceMs: SILENCE_MS,
    onFrame: (f) => {
      delivered.push(f);
      replies.push(station.handle(f[0]!, f.subarray(1, f.length - 2)));
    },
  });
  return { station, replies, delivered, framer };
}

/** A well-formed request, by kind. `unit` 1 is the device; 2 is not on this line. */
const requestArb: fc.Arbitrary<Buffer> = fc
  .record({
    unit: fc.constantFrom(1, 1, 1, 2),
    kind: fc.constantFrom("command", "command", "command", "read", "keepalive", "fc6-other", "partial-block", "unknown-fc"),
    token: fc.integer({ min: 0, max: 6 }),
    seq: fc.integer({ min: 0, max: 6 }),
    target: fc.oneof(fc.integer({ min: 0, max: 10_000 }), fc.integer({ min: 10_001, max: 0xffff })),
    addr: fc.integer({ min: 0, max: 0x60 }),
    count: fc.integer({ min: 1, max: 10 }),
  })
  .map((r) => {
    switch (r.kind) {
      case "command": {
        const regs = [...u64ToWords(BigInt(r.token)), ...u32ToWords(r.seq), r.target];
        return withCrc(Buffer.from([r.unit, 16, ...u16(FENCED.COMMAND_START), ...u16(regs.length), 2 * regs.length, ...words(regs)]));
      }
      case "partial-block":
        return withCrc(Buffer.from([r.unit, 16, ...u16(FENCED.COMMAND_START + 1), 0, 2, 4, ...words([r.token, r.seq])]));
      case "read":
        return withCrc(Buffer.from([r.unit, 3, ...u16(r.addr), ...u16(r.count)]));
      case "keepalive":
        return withCrc(Buffer.from([r.unit, 6, ...u16(FENCED.KEEPALIVE), 0, 1]));
      case "fc6-other":
        return withCrc(Buffer.from([r.unit, 6, ...u16(r.addr), ...u16(r.target)]));
      default:
        return withCrc(Buffer.from([r.unit, 0x2b, 0x0e, 0x01, r.seq]));
    }
  });

/** Bytes that hold no CRC-valid frame at their start, whatever length is read: pure noise. */
const noiseArb = fc
  .uint8Array({ minLength: 1, maxLength: 30 })
  .map((b) => Buffer.from(b))
  .filter((b) => {
    for (let n = 4; n <= b.length; n++) if (hasValidCrc(b.subarray(0, n))) return false;
    return true;
  });

type Item =
  | { readonly kind: "valid"; readonly bytes: Buffer; readonly silenceAfter: boolean }
  | { readonly kind: "invalid"; readonly bytes: Buffer; readonly why: string };

/** A request damaged so that the line delivers something no device may act on. */
const damagedArb: fc.Arbitrary<Item> = fc
  .tuple(requestArb, fc.nat(), fc.integer({ min: 0, max: 7 }), fc.integer({ min: 1, max: 255 }), fc.nat())
  .map(([req, at, bit, x, cut]) => {
    const b = Buffer.from(req);
    const choice = at % 3;
    if (choice === 0) {
      // One bit flipped in a byte that does not decide the frame's length (the CRC catches every single-bit error).
      const lengthBytes = new Set([1, b[1] === 15 || b[1] === 16 ? 6 : -1]);
      let i = at % b.length;
      while (lengthBytes.has(i)) i = (i + 1) % b.length;
      b[i]! ^= 1 << bit;
      return { kind: "invalid", bytes: b, why: `bit ${bit} of byte ${i}` };
    }
    if (choice === 1) {
      b[b.length - 1 - (x % 2)]! ^= x; // a wrong CRC
      return { kind: "invalid", bytes: b, why: "crc" };
    }
    return { kind: "invalid", bytes: b.subarray(0, cut % b.length), why: "truncated" };
  });

const itemArb: fc.Arbitrary<Item> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .tuple(requestArb, fc.boolean())
      .map(([bytes, silenceAfter]): Item => ({ kind: "valid", bytes, silenceAfter: silenceAfter || bytes[1] === 0x2b })),
  },
  { weight: 2, arbitrary: damagedArb },
  { weight: 1, arbitrary: noiseArb.map((bytes): Item => ({ kind: "invalid", bytes, why: "noise" })) },
);

/** `bytes` cut into chunks at random points. */
function chunks(bytes: Buffer, cuts: readonly number[]): Buffer[] {
  const points = [...new Set([0, ...cuts.map((c) => c % (bytes.length + 1)), bytes.length])].sort((a, b) => a - b);
  return points.slice(1).map((end, i) => bytes.subarray(points[i]!, end));
}

/** What the device says about itself, minus nothing: the whole snapshot. */
const state = (s: Station) => s.snapshot(1);

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("the simulator's RTU framing and station under fuzzing", () => {
  it(
    "processes exactly the valid frames, split anyhow and among noise and damaged frames, as a device fed them alone",
    () => {
      fc.assert(
        fc.property(fc.array(fc.tuple(itemArb, fc.array(fc.nat(), { maxLength: 4 })), { minLength: 1, maxLength: 12 }), (items) => {
          const real = rig();
          const model = new Station([CONFIG], new MemoryEeprom(), () => 0);
          const modelReplies: (Reply | null)[] = [];
          let previous: Item | null = null;
          for (const [item, cuts] of items) {
            // Noise or a damaged frame is ended by a silence (as on a real line, where
            // resynchronisation needs one); so is a valid frame after one of those.
            if (item.kind === "valid" && previous !== null && (previous.kind === "invalid" || previous.silenceAfter))
              vi.advanceTimersByTime(SILENCE_MS + 2);
            for (const chunk of chunks(item.bytes, cuts)) real.framer.push(Buffer.from(chunk));
            if (item.kind === "invalid") vi.advanceTimersByTime(SILENCE_MS + 2);
            else if (item.silenceAfter) vi.advanceTimersByTime(SILENCE_MS + 2);
            if (item.kind === "valid") modelReplies.push(model.handle(item.bytes[0]!, item.bytes.subarray(1, item.bytes.length - 2)));
            previous = item;
          }
          vi.advanceTimersByTime(SILENCE_MS + 2);
          for (const f of real.delivered) expect(hasValidCrc(f)).toBe(true);
          expect(real.delivered.length).toBe(modelReplies.length);
          expect(real.replies).toEqual(modelReplies);
          expect(state(real.station)).toEqual(state(model));
          real.framer.close();
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "never crashes and never changes the device on arbitrary bytes with arbitrary silences, unless a CRC-valid frame got through",
    () => {
      fc.assert(
        fc.property(fc.array(fc.tuple(fc.uint8Array({ maxLength: 64 }), fc.boolean()), { maxLength: 10 }), (stream) => {
          const real = rig();
          const before = state(real.station);
          for (const [bytes, silence] of stream) {
            real.framer.push(Buffer.from(bytes));
            if (silence) vi.advanceTimersByTime(SILENCE_MS + 2);
          }
          vi.advanceTimersByTime(SILENCE_MS + 2);
          for (const f of real.delivered) expect(hasValidCrc(f)).toBe(true);
          if (!real.delivered.some((f) => f[0] === 1 || f[0] === 0)) expect(state(real.station)).toEqual(before);
          real.framer.close();
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "a command block with one bit flipped anywhere is never acted on, whatever came before",
    () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: 1000 }),
          fc.integer({ min: 0, max: 10_000 }),
          fc.nat(),
          fc.integer({ min: 0, max: 7 }),
          (token, target, at, bit) => {
            const real = rig();
            const regs = [...u64ToWords(BigInt(token)), ...u32ToWords(0), target];
            const frame = withCrc(Buffer.from([1, 16, ...u16(FENCED.COMMAND_START), ...u16(regs.length), 2 * regs.length, ...words(regs)]));
            const bad = Buffer.from(frame);
            bad[at % bad.length]! ^= 1 << bit;
            const before = state(real.station);
            real.framer.push(bad);
            vi.advanceTimersByTime(SILENCE_MS + 2);
            // Flipping the function code or byte count can frame a shorter or longer read; it
            // is still no command: the fence and the target never move.
            const after = state(real.station);
            expect(after.fence).toEqual(before.fence);
            expect(after.targetPosition).toBe(before.targetPosition);
            expect(after.applied).toEqual([]);
            // The intact frame afterwards is acted on.
            real.framer.push(frame);
            vi.advanceTimersByTime(SILENCE_MS + 2);
            expect(state(real.station).fence.token).toBe(token);
            real.framer.close();
          },
        ),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});
