/**
 * What the answer to one Modbus request must look like, shared by the RTU and the TCP port:
 * the unit, the function code (or its exception), the length, and the bytes the request
 * fixes (a read's byte count, a write's echoed address and quantity or value). An answer
 * that differs in any of them is never taken as the answer: over TCP, where the transaction
 * id says it IS the answer, it is a malformed answer; over RTU it is skipped (it may be a
 * late answer to an earlier request) and the transaction times out.
 */
import { EventEmitter } from "node:events";
import { DeviceAnswerError } from "../../shell/ports.ts";

/** Received bytes kept while an answer is awaited: several whole answers of either transport. */
const MAX_BUFFER_BYTES = 1024;

/** The device's answer does not fit the request: never a value, never a confirmation. */
export class MalformedAnswerError extends DeviceAnswerError {
  override readonly name: string = "MalformedAnswerError";
}

/** The length of a normal RTU response to `request` (an RTU frame), or null when it cannot be known up front. */
function expectedResponseLength(request: Uint8Array): number | null {
  const fc = request[1];
  const quantity = request.length >= 6 ? (request[4]! << 8) | request[5]! : 0;
  switch (fc) {
    case 1:
    case 2:
      return 5 + Math.ceil(quantity / 8);
    case 3:
    case 4:
      return 5 + 2 * quantity;
    case 5:
    case 6:
    case 15:
    case 16:
      return 8;
    default:
      return null;
  }
}

/** What the answer to one request must look like. */
export interface Expectation {
  readonly unit: number;
  readonly fc: number;
  /** Length of the normal RTU response (null: unknown function code, only an exception is taken). */
  readonly length: number | null;
  /**
   * Bytes 2.. of the normal RTU response (1.. of its PDU) that are fixed by the request: the
   * byte count of a read (FC01..04), the echoed address and value/quantity of a write
   * (FC05/06/15/16). Two writes of one unit and function differ only there, so a late
   * answer to the other one (same length, valid CRC) is not taken for this one's.
   */
  readonly fixed: Buffer;
}

/** The expectation for `request` (an RTU frame: unit, fc, data, CRC); null for a broadcast. */
export function expectationFor(request: Uint8Array): Expectation | null {
  const unit = request[0]!;
  if (unit === 0) return null; // a broadcast gets no answer
  const fc = request[1]!;
  const length = expectedResponseLength(request);
  let fixed = Buffer.alloc(0);
  if (length !== null && (fc === 1 || fc === 2 || fc === 3 || fc === 4)) fixed = Buffer.from([length - 5]);
  else if (length !== null && request.length >= 6) fixed = Buffer.from(request.subarray(2, 6));
  return { unit, fc, length, fixed };
}

/**
 * Why the answer `pdu` from `unit` does not fit `expect`, in words for an operator, or null
 * when it does (a normal answer, or a well-formed exception).
 */
export function misfit(expect: Expectation, unit: number, pdu: Uint8Array): string | null {
  const fc = pdu[0];
  if (unit !== expect.unit) return `an answer from unit ${unit} to a request for unit ${expect.unit}`;
  if (fc === (expect.fc | 0x80)) return pdu.length === 2 ? null : `an exception answer of ${pdu.length} bytes instead of 2`;
  if (fc !== expect.fc) return `function code ${String(fc)} in the answer to function ${expect.fc}`;
  if (expect.length === null) return null;
  const { fixed } = expect;
  if (fc >= 1 && fc <= 4) {
    const count = pdu[1];
    if (count !== fixed[0]) return `byte count ${String(count)} where ${fixed[0]} bytes were asked for`;
    if (pdu.length !== 2 + fixed[0]!) return `byte count ${String(count)} with ${pdu.length - 2} data bytes`;
    return null;
  }
  if (pdu.length !== expect.length - 3) return `a ${pdu.length}-byte answer where ${expect.length - 3} were expected`;
  const word = (b: Uint8Array, at: number) => (b[at]! << 8) | b[at + 1]!;
  if (word(pdu, 1) !== word(fixed, 0)) return `an echo of address ${word(pdu, 1)} where ${word(fixed, 0)} was written`;
  if (word(pdu, 3) !== word(fixed, 2)) {
    const what = fc === 5 || fc === 6 ? "value" : "quantity";
    return `an echo of ${what} ${word(pdu, 3)} where ${word(fixed, 2)} was written`;
  }
  return null;
}

/**
 * The receiving half shared by the RTU and the TCP port that modbus-serial's master talks
 * through: what the answer to the request in progress must look like, the bytes received
 * since it was written (and only those), and what else came meanwhile. Each transport
 * finds the answer in those bytes its own way ({@link scan}).
 */
export abstract class AnswerPort<E extends Expectation> extends EventEmitter {
  protected rx = Buffer.alloc(0);
  protected expect: E | null = null;
  /** What arrived for the request in progress that was not its answer, for the timeout's report. */
  ignored: string | null = null;
  /** performance.now() of the last byte received. */
  lastByteAtMs = 0;
  // modbus-serial keeps its transaction counters on the port object; the master sees one
  // transaction at a time, so they stay at 1.
  _transactionIdRead = 1;
  _transactionIdWrite = 1;

  /** A request is being written: nothing received before it can answer it. */
  protected awaitAnswer(expect: E | null): void {
    this.rx = Buffer.alloc(0);
    this.expect = expect;
    this.ignored = null;
  }

  /** Drops everything received so far (after a timeout: whatever trickles in is stale). */
  discardInput(): void {
    this.rx = Buffer.alloc(0);
    this.expect = null;
  }

  /** @internal The transport's data handler (public so tests can feed it bytes). */
  onData(chunk: Buffer): void {
    this.lastByteAtMs = performance.now();
    if (this.expect === null) return; // unsolicited or late: never an answer
    this.rx = Buffer.concat([this.rx, chunk]);
    if (this.rx.length > MAX_BUFFER_BYTES) this.rx = this.rx.subarray(this.rx.length - MAX_BUFFER_BYTES);
    this.scan(this.expect);
  }

  /** Looks for the answer in `rx`; calls {@link finish} once it is there (or is malformed). */
  protected abstract scan(expect: E): void;

  /** Hands the answer (an RTU frame with CRC) to the master, or reports it malformed. */
  protected finish(answer: Buffer | MalformedAnswerError): void {
    this.expect = null;
    this.rx = Buffer.alloc(0);
    if (answer instanceof MalformedAnswerError) this.emit("malformed", answer);
    else this.emit("data", answer);
  }
}
