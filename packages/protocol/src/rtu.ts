/**
 * Modbus RTU on the line: CRC-16/MODBUS, character timing, and a request's length from its
 * function code. Shared by the gateway's serial and TCP ports and the simulated device's
 * frame assembler (firmware-bridge/src/rtu-framer.ts, firmware-bridge/README.md "Framing on a pty").
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
