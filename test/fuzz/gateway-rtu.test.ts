/**
 * Fuzzing the gateway's RTU reply framing (src/adapters/modbus/rtu-port.ts): the pure
 * `takeResponse` and the RtuPort driven in memory (no serial port: `write` only sets what is
 * expected, `onData` is fed the bytes), with random and near-valid byte streams.
 *
 * Never a crash; never a frame taken that is not a CRC-valid answer from the expected unit
 * with the expected function (or its exception), length and request-fixed bytes; never an
 * answer taken for the wrong request: nothing received before a request or after its
 * answer is taken for it, and a late answer to a different request is not taken.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { expectationFor, type Expectation } from "../../src/adapters/modbus/framing.ts";
import { RtuPort, takeResponse } from "../../src/adapters/modbus/rtu-port.ts";
import { hasValidCrc, withCrc } from "../../packages/protocol/src/rtu.ts";
import { answerTo, chunked, exceptionTo, requestArb } from "./modbus-arbs.ts";
import { FUZZ_TIMEOUT_MS, runs } from "./runs.ts";

/** What may be taken as the answer to `expect`: the property every taken frame must have. */
function isAnswer(frame: Buffer, expect: Expectation): boolean {
  if (!hasValidCrc(frame) || frame[0] !== expect.unit) return false;
  if (frame[1] === (expect.fc | 0x80)) return frame.length === 5;
  return frame[1] === expect.fc && frame.length === expect.length && expect.fixed.every((b, j) => frame[2 + j] === b);
}

/** The reference: the answer at the lowest offset of `rx`, found by brute force. */
function firstAnswer(rx: Buffer, expect: Expectation): Buffer | null {
  for (let i = 0; i < rx.length; i++) {
    for (const size of [5, expect.length ?? 5]) {
      if (i + size <= rx.length && isAnswer(rx.subarray(i, i + size), expect)) return Buffer.from(rx.subarray(i, i + size));
    }
  }
  return null;
}

/** Line noise, near-valid frames and the request's own answers (valid, corrupted, truncated), in any order. */
function streamFor(request: Buffer, other: Buffer): fc.Arbitrary<Buffer> {
  const piece = fc.oneof(
    fc.uint8Array({ maxLength: 24 }).map((b) => Buffer.from(b)),
    fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 }).map((d) => answerTo(request, d)),
    fc.integer({ min: 1, max: 255 }).map((c) => exceptionTo(request, c)),
    fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 }).map((d) => answerTo(other, d)),
    fc.integer({ min: 1, max: 255 }).map((c) => exceptionTo(other, c)),
    // A valid answer with one bit flipped: the CRC catches every single-bit error.
    fc.tuple(fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 }), fc.nat(), fc.integer({ min: 0, max: 7 })).map(([d, at, bit]) => {
      const a = Buffer.from(answerTo(request, d));
      a[at % a.length]! ^= 1 << bit;
      return a;
    }),
    // Truncated.
    fc.tuple(fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 }), fc.nat()).map(([d, cut]) => {
      const a = answerTo(request, d);
      return a.subarray(0, cut % a.length);
    }),
  );
  return fc.array(piece, { maxLength: 6 }).map((parts) => Buffer.concat(parts));
}

describe("the gateway's RTU reply framing under fuzzing", () => {
  it(
    "takeResponse never throws, takes only a valid answer to the request, and the first one in the stream",
    () => {
      const arb = fc.tuple(requestArb, requestArb).chain(([request, other]) => fc.tuple(fc.constant(request), streamFor(request, other)));
      fc.assert(
        fc.property(arb, ([request, rx]) => {
          const expect_ = expectationFor(request)!;
          const taken = takeResponse(rx, expect_);
          const reference = firstAnswer(rx, expect_);
          if (taken !== null) expect(isAnswer(taken, expect_)).toBe(true);
          expect(taken === null ? null : [...taken]).toEqual(reference === null ? null : [...reference]);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "takeResponse never throws on arbitrary bytes against arbitrary requests, even malformed ones",
    () => {
      fc.assert(
        fc.property(fc.uint8Array({ minLength: 2, maxLength: 12 }), fc.uint8Array({ maxLength: 600 }), (request, rx) => {
          const e = expectationFor(Buffer.from(request));
          if (e === null) return;
          const taken = takeResponse(Buffer.from(rx), e);
          if (taken !== null) expect(isAnswer(taken, e)).toBe(true);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "RtuPort: whatever the chunking, noise before the answer and a late answer to another request, it passes up this request's answer, once",
    () => {
      const arb = fc
        .tuple(requestArb, requestArb, fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 }), fc.uint8Array({ maxLength: 20 }))
        .chain(([request, previous, data, noise]) => {
          const late = answerTo(previous, data);
          const answer = answerTo(request, data);
          const stream = Buffer.concat([Buffer.from(noise), late, answer, Buffer.from(noise)]);
          return fc.tuple(fc.constant({ request, previous, late, answer, stream, noise: Buffer.from(noise) }), chunked(stream));
        });
      fc.assert(
        fc.property(arb, ([c, chunks]) => {
          const port = new RtuPort({ path: "/dev/null", baudRate: 115200, parity: "even", stopBits: 1, dataBits: 8 });
          const taken: Buffer[] = [];
          port.on("data", (f: Buffer) => taken.push(f));
          // The previous request timed out; its answer's first bytes trickled in before the next request.
          port.write(c.previous);
          port.discardInput();
          port.onData(c.late.subarray(0, 3));
          port.write(c.request);
          for (const chunk of chunks) port.onData(Buffer.from(chunk));
          // More bytes after the answer are never a second answer.
          port.onData(c.answer);
          const e = expectationFor(c.request)!;
          expect(taken.length).toBe(1);
          expect(isAnswer(taken[0]!, e)).toBe(true);
          const lateFits = isAnswer(c.late, e);
          const noiseFits = firstAnswer(Buffer.concat([c.noise, c.late]), e) !== null;
          // Unless the late answer (or noise) is byte for byte a valid answer to this request
          // too (the bus's quiet window is what keeps those apart), this request's answer is taken.
          if (!lateFits && !noiseFits) expect([...taken[0]!]).toEqual([...c.answer]);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "RtuPort: bytes with no request outstanding are never an answer",
    () => {
      fc.assert(
        fc.property(
          requestArb,
          fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 }),
          fc.uint8Array({ maxLength: 40 }),
          (request, data, noise) => {
            const port = new RtuPort({ path: "/dev/null", baudRate: 115200, parity: "even", stopBits: 1, dataBits: 8 });
            const taken: Buffer[] = [];
            port.on("data", (f: Buffer) => taken.push(f));
            port.onData(answerTo(request, data)); // before any request
            port.write(request);
            port.discardInput(); // timed out
            port.onData(Buffer.concat([Buffer.from(noise), answerTo(request, data)]));
            expect(taken).toEqual([]);
          },
        ),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});

describe("regressions found by fuzzing", () => {
  it("a late echo of a write to another register is not the answer to this write (plain profile, same unit and function)", () => {
    const port = new RtuPort({ path: "/dev/null", baudRate: 115200, parity: "even", stopBits: 1, dataBits: 8 });
    const taken: Buffer[] = [];
    port.on("data", (f: Buffer) => taken.push(f));
    const writeA = withCrc(Buffer.from([1, 16, 0x00, 0x01, 0x00, 0x01, 2, 0x00, 0x05]));
    const writeB = withCrc(Buffer.from([1, 16, 0x00, 0x02, 0x00, 0x01, 2, 0x00, 0x07]));
    port.write(writeA);
    port.discardInput(); // A timed out
    port.write(writeB);
    port.onData(answerTo(writeA, [])); // A's echo, later than the quiet window
    expect(taken).toEqual([]);
    port.onData(answerTo(writeB, []));
    expect(taken.map((f) => [...f])).toEqual([[...answerTo(writeB, [])]]);
  });

  it("a read's answer must carry the byte count of the quantity asked for", () => {
    const read = withCrc(Buffer.from([1, 3, 0, 0, 0, 2]));
    const e = expectationFor(read)!;
    const wrongCount = withCrc(Buffer.from([1, 3, 3, 0, 1, 0, 2])); // 9 bytes like the answer, byte count 3
    expect(takeResponse(wrongCount, e)).toBe(null);
    expect(takeResponse(answerTo(read, [0, 1, 0, 2]), e)).not.toBe(null);
  });
});
