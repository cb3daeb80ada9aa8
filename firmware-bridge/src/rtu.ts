/**
 * Modbus RTU framing: CRC-16/MODBUS, character timing, and a server-side frame assembler.
 *
 * How the assembler frames (see README "Framing on a pty"): a request is complete as soon as
 * the buffer holds the number of bytes its function code implies (8 for FC01..06, 9 + N for
 * FC15/16) and the CRC over exactly those bytes is valid: it is handed over at once, without
 * waiting for the silence. A silence timer (t3.5, with a floor because timers in Node and
 * chunked pty reads are coarser than 1.75 ms) ends everything else: a frame whose length
 * cannot be known (an unsupported function code) is taken as whatever arrived before the
 * silence, and a frame with a bad CRC or a truncated one is dropped at the silence, so the
 * next frame starts clean (resynchronisation, as a real device does).
 */

/** CRC-16/MODBUS (poly 0xA001 reflected, init 0xFFFF). Transmitted low byte first. */
export function crc16(buf: Uint8Array, start = 0, end = buf.length): number {
  let crc = 0xffff;
  for (let i = start; i < end; i++) {
    crc ^= buf[i] ?? 0;
    for (let b = 0; b < 8; b++) crc = crc & 1 ? (crc >>> 1) ^ 0xa001 : crc >>> 1;
  }
  return crc;
}

/** `frame` followed by its CRC (low byte first). */
export function withCrc(frame: Uint8Array): Buffer {
  const out = Buffer.alloc(frame.length + 2);
  out.set(frame, 0);
  out.writeUInt16LE(crc16(frame), frame.length);
  return out;
}

/** True when the last two bytes are the CRC of the others. */
export function hasValidCrc(frame: Uint8Array): boolean {
  if (frame.length < 4) return false;
  const n = frame.length - 2;
  return crc16(frame, 0, n) === ((frame[n] ?? 0) | ((frame[n + 1] ?? 0) << 8));
}

/** Bits per character in RTU: start + 8 data + parity (or second stop) + stop. */
export const BITS_PER_CHAR = 11;

/** Time to transmit `bytes` characters at `baud`, in ms. */
export function charsMs(bytes: number, baud: number): number {
  return (bytes * BITS_PER_CHAR * 1000) / baud;
}

/** Inter-frame silence t3.5 in ms: 3.5 character times, fixed at 1.75 ms above 19200 baud. */
export function t35Ms(baud: number): number {
  return baud > 19200 ? 1.75 : charsMs(3.5, baud);
}

/** Minimum line time of one transaction: request + t3.5 + response + t3.5 (no turnaround). */
export function transactionLimitMs(requestBytes: number, responseBytes: number, baud: number): number {
  return charsMs(requestBytes + responseBytes, baud) + 2 * t35Ms(baud);
}

/**
 * Length of the REQUEST frame (address to CRC) starting at buf[0], from its function code:
 * a number when known, `undefined` when more bytes are needed to know, `null` when the
 * function code gives no length (unsupported function: framed by silence only).
 */
export function expectedRequestLength(buf: Uint8Array): number | null | undefined {
  if (buf.length < 2) return undefined;
  const fc = buf[1] ?? 0;
  switch (fc) {
    case 0x01:
    case 0x02:
    case 0x03:
    case 0x04:
    case 0x05:
    case 0x06:
      return 8; // addr fc a a b b crc crc
    case 0x0f:
    case 0x10: {
      if (buf.length < 7) return undefined;
      return 9 + (buf[6] ?? 0); // addr fc a a n n bytecount data... crc crc
    }
    default:
      return null;
  }
}

export interface FramerOptions {
  /** Silence that ends a frame, ms. Use max(t3.5, a floor of a few ms) on a pty. */
  readonly silenceMs: number;
  readonly onFrame: (frame: Buffer) => void;
  /** A frame that was dropped (bad CRC, truncated); for counters and tests. */
  readonly onDrop?: (bytes: Buffer, why: "crc" | "short") => void;
}

/** Server-side RTU frame assembler; feed it every chunk read from the line. */
export class RtuFramer {
  private buf: Buffer = Buffer.alloc(0);
  private timer: NodeJS.Timeout | undefined;
  /** Set once the bytes in the buffer are known to be garbage: drop everything until silence. */
  private discarding = false;

  constructor(private readonly opts: FramerOptions) {}

  push(chunk: Buffer): void {
    this.buf = this.buf.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.buf, chunk]);
    this.restartTimer();
    if (!this.discarding) this.drain();
  }

  /** Hand over every complete frame with a valid CRC at the head of the buffer. */
  private drain(): void {
    for (;;) {
      const len = expectedRequestLength(this.buf);
      if (len === undefined || len === null || this.buf.length < len) return;
      const frame = this.buf.subarray(0, len);
      if (!hasValidCrc(frame)) {
        // Wrong length guess or line noise: a real device ignores the frame and waits for silence.
        this.discarding = true;
        return;
      }
      this.buf = Buffer.from(this.buf.subarray(len));
      this.opts.onFrame(Buffer.from(frame));
    }
  }

  private restartTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.onSilence(), this.opts.silenceMs);
  }

  private onSilence(): void {
    this.timer = undefined;
    const rest = this.buf;
    const discarding = this.discarding;
    this.buf = Buffer.alloc(0);
    this.discarding = false;
    if (rest.length === 0) return;
    const len = expectedRequestLength(rest);
    if (!discarding && len === null && rest.length >= 4 && hasValidCrc(rest)) {
      this.opts.onFrame(rest); // unknown function code: framed by silence alone
      return;
    }
    this.opts.onDrop?.(rest, discarding || len === null ? "crc" : "short");
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.buf = Buffer.alloc(0);
  }
}
