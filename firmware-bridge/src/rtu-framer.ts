/**
 * The simulated device's server-side RTU frame assembler (see README "Framing on a pty"): a
 * request is complete as soon as the buffer holds the number of bytes its function code implies
 * (8 for FC01..06, 9 + N for FC15/16) and the CRC over exactly those bytes is valid: it is
 * handed over at once, without waiting for the silence. A silence timer (t3.5, with a floor
 * because timers in Node and chunked pty reads are coarser than 1.75 ms) ends everything else:
 * a frame whose length cannot be known (an unsupported function code) is taken as whatever
 * arrived before the silence, and a frame with a bad CRC or a truncated one is dropped at the
 * silence, so the next frame starts clean (resynchronisation, as a real device does).
 */
import { expectedRequestLength, hasValidCrc } from "../../packages/protocol/src/rtu.ts";

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
