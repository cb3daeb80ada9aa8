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
import { SerialPort } from "serialport";
import { hasValidCrc } from "../../../packages/protocol/src/rtu.ts";
import { AnswerPort, expectationFor, misfit, type Expectation } from "./framing.ts";

export interface RtuLineOptions {
  readonly path: string;
  readonly baudRate: number;
  readonly parity: "none" | "even" | "odd";
  readonly stopBits: 1 | 2;
  readonly dataBits: 8;
}

const EXCEPTION_LENGTH = 5;

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

/**
 * A CRC-valid frame in `rx` from the expected unit with the expected function (or its
 * exception) that is not the answer (a short or long byte count, an echo of another
 * address): what it was, for the timeout's report, or null. Not taken, because over RTU it
 * may be a late answer to an earlier request.
 */
function findMisfit(rx: Uint8Array, expect: Expectation): string | null {
  for (let i = 0; i + EXCEPTION_LENGTH <= rx.length; i++) {
    if (rx[i] !== expect.unit || (rx[i + 1] !== expect.fc && rx[i + 1] !== (expect.fc | 0x80))) continue;
    const read = expect.fc >= 1 && expect.fc <= 4 && rx[i + 1] === expect.fc;
    const size = rx[i + 1] !== expect.fc ? EXCEPTION_LENGTH : read ? 5 + rx[i + 2]! : 8;
    if (i + size > rx.length || !hasValidCrc(rx.subarray(i, i + size))) continue;
    const why = misfit(expect, expect.unit, rx.subarray(i + 1, i + size - 2));
    if (why !== null) return why;
  }
  return null;
}

export class RtuPort extends AnswerPort<Expectation> {
  private port: SerialPort | null = null;

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
    this.awaitAnswer(expectationFor(data));
    this.port?.write(data);
  }

  protected scan(expect: Expectation): void {
    const frame = takeResponse(this.rx, expect);
    if (frame !== null) this.finish(frame);
    else this.ignored = findMisfit(this.rx, expect) ?? this.ignored;
  }
}
