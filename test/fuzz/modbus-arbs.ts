/** Modbus requests and answers for the framing fuzz tests (RTU frames: unit, PDU, CRC). */
import fc from "fast-check";
import { withCrc } from "../../packages/protocol/src/rtu.ts";

const u16 = (n: number) => [(n >> 8) & 0xff, n & 0xff];

/** A request the gateway's master sends: unit, function and fields, with its CRC. */
export const requestArb = fc
  .record({
    unit: fc.integer({ min: 1, max: 247 }),
    fc: fc.constantFrom(1, 2, 3, 4, 5, 6, 15, 16),
    addr: fc.integer({ min: 0, max: 0xffff }),
    quantity: fc.integer({ min: 1, max: 125 }),
    value: fc.integer({ min: 0, max: 0xffff }),
  })
  .map((r) => {
    let body: number[];
    if (r.fc === 5 || r.fc === 6) body = [r.unit, r.fc, ...u16(r.addr), ...u16(r.value)];
    else if (r.fc === 15 || r.fc === 16) {
      const bytes = r.fc === 16 ? 2 * r.quantity : Math.ceil(r.quantity / 8);
      body = [
        r.unit,
        r.fc,
        ...u16(r.addr),
        ...u16(r.quantity),
        bytes,
        ...Array.from({ length: bytes }, (_, i) => (i * 37 + r.value) & 0xff),
      ];
    } else body = [r.unit, r.fc, ...u16(r.addr), ...u16(r.quantity)];
    return withCrc(Buffer.from(body));
  });

/** A correct normal answer to `request`, with `data` as the read's payload bytes. */
export function answerTo(request: Buffer, data: number[]): Buffer {
  const [unit, f] = [request[0]!, request[1]!];
  if (f >= 1 && f <= 4) {
    const n = f <= 2 ? Math.ceil(((request[4]! << 8) | request[5]!) / 8) : 2 * ((request[4]! << 8) | request[5]!);
    return withCrc(Buffer.from([unit, f, n, ...Array.from({ length: n }, (_, i) => data[i % Math.max(1, data.length)] ?? i)]));
  }
  return withCrc(Buffer.from([unit, f, ...request.subarray(2, 6)]));
}

export function exceptionTo(request: Buffer, code: number): Buffer {
  return withCrc(Buffer.from([request[0]!, request[1]! | 0x80, code]));
}

/** Splits `bytes` into chunks at random points. */
export const chunked = (bytes: Buffer) =>
  fc.uniqueArray(fc.integer({ min: 1, max: Math.max(1, bytes.length - 1) }), { maxLength: 6 }).map((cuts) => {
    const points = [0, ...cuts.filter((c) => c < bytes.length).sort((a, b) => a - b), bytes.length];
    return points.slice(1).map((end, i) => bytes.subarray(points[i]!, end));
  });
