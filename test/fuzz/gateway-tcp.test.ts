/**
 * Fuzzing the gateway's Modbus TCP answer framing (src/adapters/modbus/tcp-port.ts), the
 * TcpPort driven in memory (no socket: `write` only sets what is expected, `onData` is fed
 * the bytes): random bytes, leftovers of earlier answers, near-valid and malformed ADUs.
 *
 * Never a crash; at most one verdict per request; never an answer passed up that does not
 * carry the request's transaction id and fit the request (unit, function or its exception,
 * byte count, echo); an answer with the request's transaction id that does not fit is
 * reported malformed, never passed up; the real answer behind leftovers and noise is found.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { withCrc } from "../../packages/protocol/src/rtu.ts";
import { MalformedAnswerError, expectationFor, misfit } from "../../src/adapters/modbus/framing.ts";
import { TcpPort } from "../../src/adapters/modbus/tcp-port.ts";
import { answerTo, chunked, exceptionTo, requestArb } from "./modbus-arbs.ts";
import { FUZZ_TIMEOUT_MS, runs } from "./runs.ts";

/** The TCP ADU carrying `frame`'s unit and PDU (an RTU frame) under transaction id `tid`. */
function adu(tid: number, frame: Buffer): Buffer {
  const header = Buffer.alloc(6);
  header.writeUInt16BE(tid, 0);
  header.writeUInt16BE(frame.length - 2, 4);
  return Buffer.concat([header, frame.subarray(0, frame.length - 2)]);
}

/** A port that has just written `request` (transaction id 1), and what it reports. */
function portAfter(request: Buffer) {
  const port = new TcpPort({ host: "127.0.0.1", port: 502 });
  const verdicts: (Buffer | MalformedAnswerError)[] = [];
  port.on("data", (f: Buffer) => verdicts.push(f));
  port.on("malformed", (e: MalformedAnswerError) => verdicts.push(e));
  port.write(request);
  return { port, verdicts };
}

/** Whether `frame` (RTU form, as passed up) is a fitting answer to `request`. */
function fits(request: Buffer, frame: Buffer): boolean {
  return (
    misfit(expectationFor(request)!, frame[0]!, frame.subarray(1, frame.length - 2)) === null &&
    withCrc(frame.subarray(0, frame.length - 2)).equals(frame)
  );
}

/** Whether `bytes` hold a header of transaction 1 (protocol 0) anywhere: only such bytes can be taken. */
function hasHeaderOfTid1(bytes: Buffer): boolean {
  for (let i = 0; i + 4 <= bytes.length; i++) if (bytes.readUInt32BE(i) === 0x0001_0000) return true;
  return false;
}

const data = fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 8 });

describe("the gateway's Modbus TCP answer framing under fuzzing", () => {
  it(
    "never throws on arbitrary bytes; passes up at most one answer, and only one that fits",
    () => {
      fc.assert(
        fc.property(requestArb, fc.uint8Array({ maxLength: 300 }), (request, rx) => {
          const { port, verdicts } = portAfter(request);
          port.onData(Buffer.from(rx));
          expect(verdicts.length).toBeLessThanOrEqual(1);
          for (const v of verdicts) if (!(v instanceof MalformedAnswerError)) expect(fits(request, v)).toBe(true);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "finds the answer behind the leftovers of a truncated earlier answer and noise, whatever the chunking",
    () => {
      const arb = fc
        .tuple(requestArb, requestArb, data, fc.nat(), fc.uint8Array({ maxLength: 20 }), fc.boolean(), fc.integer({ min: 1, max: 255 }))
        .chain(([request, previous, d, cut, noise, asException, code]) => {
          const earlier = adu(0xffff, answerTo(previous, d));
          const answer = asException ? exceptionTo(request, code) : answerTo(request, d);
          const leftovers = earlier.subarray(cut % earlier.length);
          const stream = Buffer.concat([leftovers, Buffer.from(noise), adu(1, answer)]);
          return fc.tuple(fc.constant({ request, answer, prefix: Buffer.concat([leftovers, Buffer.from(noise)]) }), chunked(stream));
        });
      fc.assert(
        fc.property(arb, ([c, chunks]) => {
          fc.pre(!hasHeaderOfTid1(c.prefix)); // a false header of this transaction in the noise is the device's answer
          const { port, verdicts } = portAfter(c.request);
          for (const chunk of chunks) port.onData(Buffer.from(chunk));
          port.onData(adu(1, c.answer)); // a second copy is never a second answer
          expect(verdicts).toEqual([c.answer]);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "an answer with the request's transaction id that does not fit is malformed, never a value",
    () => {
      const arb = fc.tuple(requestArb, data, fc.integer({ min: 2, max: 12 }), fc.integer({ min: 0, max: 255 }));
      fc.assert(
        fc.property(arb, ([request, d, at, xor]) => {
          const answer = Buffer.from(answerTo(request, d));
          const body = answer.subarray(0, answer.length - 2);
          body[at % body.length]! ^= xor; // unit, function, byte count, echo or data
          const spoiled = withCrc(body);
          const { port, verdicts } = portAfter(request);
          port.onData(adu(1, spoiled));
          expect(verdicts).toHaveLength(1);
          const wrong = misfit(expectationFor(request)!, spoiled[0]!, spoiled.subarray(1, spoiled.length - 2));
          if (wrong === null)
            expect(verdicts[0]).toEqual(spoiled); // only the data changed: still an answer
          else expect(verdicts[0]).toMatchObject({ name: "MalformedAnswerError", message: wrong });
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    "bytes with no request outstanding, or after a timeout, are never an answer",
    () => {
      fc.assert(
        fc.property(requestArb, data, fc.uint8Array({ maxLength: 40 }), (request, d, noise) => {
          const port = new TcpPort({ host: "127.0.0.1", port: 502 });
          const verdicts: unknown[] = [];
          port.on("data", (f: Buffer) => verdicts.push(f));
          port.on("malformed", (e: Error) => verdicts.push(e));
          port.onData(adu(1, answerTo(request, d))); // before any request
          port.write(request);
          port.discardInput(); // timed out
          port.onData(Buffer.concat([Buffer.from(noise), adu(1, answerTo(request, d))]));
          expect(verdicts).toEqual([]);
        }),
        runs(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});
