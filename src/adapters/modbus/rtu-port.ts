/**
 * The serial port object modbus-serial's master talks through, for Modbus RTU.
 *
 * Why not modbus-serial's own RTUBufferedPort: it keeps unconsumed bytes across
 * transactions and scans them for the next answer, so a slave's late reply to a request
 * that already timed out can be taken for the answer to the next request (libmodbus#83).
 * Here the receive buffer is emptied whenever a request is written (RTU is half duplex:
 * nothing received before our request can answer it), a frame is only passed up when its
 * CRC is valid, and the bus can ask how long the line has been quiet before it sends again.
 */
import { EventEmitter } from "node:events";
import { SerialPort } from "serialport";
import { hasValidCrc } from "../../../firmware-bridge/src/rtu.ts";

export interface RtuLineOptions {
  readonly path: string;
  readonly baudRate: number;
  readonly parity: "none" | "even" | "odd";
  readonly stopBits: 1 | 2;
  readonly dataBits: 8;
}

const EXCEPTION_LENGTH = 5;
const MAX_BUFFER_BYTES = 512;

/** The length of a normal response to `request`, or null when it cannot be known up front. */
export function expectedResponseLength(request: Uint8Array): number | null {
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
  /** Length of the normal response (null: unknown function code, only an exception is taken). */
  readonly length: number | null;
  /**
   * Bytes 2.. of the normal response that are fixed by the request: the byte count of a
   * read (FC01..04), the echoed address and value/quantity of a write (FC05/06/15/16).
   * Two writes of one unit and function differ only there, so a late answer to the other
   * one (same length, valid CRC) is not taken for this one's.
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
 * The answer to `expect` in `rx`, the bytes received since the request was written: the
 * first frame, at any offset (line noise may precede it), that is addressed from the
 * expected unit, carries the expected function (or its exception), has the expected length
 * and fixed bytes, and a valid CRC. Null while there is none.
 */
export function takeResponse(rx: Uint8Array, expect: Expectation): Buffer | null {
  const { unit, fc, length, fixed } = expect;
  for (let i = 0; i + EXCEPTION_LENGTH <= rx.length; i++) {
    if (rx[i] !== unit) continue;
    const f = rx[i + 1];
    const normal = f === fc;
    const size = normal ? length : f === (fc | 0x80) ? EXCEPTION_LENGTH : null;
    if (size === null || i + size > rx.length) continue;
    const frame = rx.subarray(i, i + size);
    if (normal && fixed.some((b, j) => frame[2 + j] !== b)) continue;
    if (!hasValidCrc(frame)) continue;
    return Buffer.from(frame);
  }
  return null;
}

export class RtuPort extends EventEmitter {
  private port: SerialPort | null = null;
  private rx = Buffer.alloc(0);
  private expect: Expectation | null = null;
  /** performance.now() of the last byte seen on the line. */
  lastByteAtMs = 0;
  // modbus-serial keeps its transaction counters on the port object.
  _transactionIdRead = 1;
  _transactionIdWrite = 1;

  constructor(private readonly options: RtuLineOptions) {
    super();
  }

  get isOpen(): boolean {
    return this.port?.isOpen ?? false;
  }

  open(callback: (err: Error | null) => void): void {
    const port = new SerialPort({
      path: this.options.path,
      baudRate: this.options.baudRate,
      parity: this.options.parity,
      stopBits: this.options.stopBits,
      dataBits: this.options.dataBits,
      lock: true, // exclusive: a second process on the same adapter would corrupt the bus
      autoOpen: false,
    });
    port.on("data", (chunk: Buffer) => this.onData(chunk));
    port.on("error", (err) => this.emit("error", err));
    port.on("close", () => this.emit("close"));
    port.open((err) => {
      if (err) {
        port.removeAllListeners();
        callback(err);
        return;
      }
      this.port = port;
      callback(null);
    });
  }

  close(callback?: (err?: Error | null) => void): void {
    const port = this.port;
    this.port = null;
    if (!port || !port.isOpen) {
      callback?.(null);
      return;
    }
    port.close((err) => callback?.(err ?? null));
  }

  write(data: Buffer): void {
    this.rx = Buffer.alloc(0);
    this.expect = expectationFor(data);
    this.port?.write(data);
  }

  /** Drops everything received so far (after a timeout: whatever trickles in is stale). */
  discardInput(): void {
    this.rx = Buffer.alloc(0);
    this.expect = null;
  }

  /** @internal The serial port's data handler (public so tests can feed it bytes). */
  onData(chunk: Buffer): void {
    this.lastByteAtMs = performance.now();
    if (this.expect === null) return; // unsolicited or late: never an answer
    this.rx = Buffer.concat([this.rx, chunk]);
    if (this.rx.length > MAX_BUFFER_BYTES) this.rx = this.rx.subarray(this.rx.length - MAX_BUFFER_BYTES);
    const frame = takeResponse(this.rx, this.expect);
    if (frame === null) return;
    this.expect = null;
    this.rx = Buffer.alloc(0);
    this.emit("data", frame);
  }
}
