/**
 * Modbus PDU handling (function code + data, no address, no CRC/MBAP): parses a request,
 * checks it the way the Modbus application protocol says (01 illegal function, 02 illegal
 * address, 03 illegal value), and asks the register map. Transport-independent.
 */
import type { Device, Refusal } from "./device.ts";
import { EXCEPTION } from "../../packages/protocol/src/modbus-profile.ts";

export function exceptionPdu(fc: number, code: number): Buffer {
  return Buffer.from([(fc | 0x80) & 0xff, code & 0xff]);
}

function isRefusal(x: number[] | Refusal | undefined): x is Refusal {
  return x !== undefined && !Array.isArray(x);
}

/** Handles one request PDU; returns the response PDU (normal or exception). */
export function handlePdu(device: Device, pdu: Buffer, now: number): Buffer {
  const fc = pdu[0] ?? 0;
  switch (fc) {
    case 0x03:
    case 0x04: {
      if (pdu.length !== 5) return exceptionPdu(fc, EXCEPTION.ILLEGAL_DATA_VALUE);
      const addr = pdu.readUInt16BE(1);
      const count = pdu.readUInt16BE(3);
      if (count < 1 || count > 125) return exceptionPdu(fc, EXCEPTION.ILLEGAL_DATA_VALUE);
      const regs = device.read(addr, count, now);
      if (isRefusal(regs)) return exceptionPdu(fc, regs.exception);
      const out = Buffer.alloc(2 + 2 * count);
      out[0] = fc;
      out[1] = 2 * count;
      regs.forEach((r, i) => out.writeUInt16BE(r & 0xffff, 2 + 2 * i));
      return out;
    }
    case 0x06: {
      if (pdu.length !== 5) return exceptionPdu(fc, EXCEPTION.ILLEGAL_DATA_VALUE);
      const refused = device.write(pdu.readUInt16BE(1), [pdu.readUInt16BE(3)], 6, now);
      return isRefusal(refused) ? exceptionPdu(fc, refused.exception) : Buffer.from(pdu);
    }
    case 0x10: {
      if (pdu.length < 6) return exceptionPdu(fc, EXCEPTION.ILLEGAL_DATA_VALUE);
      const addr = pdu.readUInt16BE(1);
      const count = pdu.readUInt16BE(3);
      const byteCount = pdu[5] ?? 0;
      if (count < 1 || count > 123 || byteCount !== 2 * count || pdu.length !== 6 + byteCount) {
        return exceptionPdu(fc, EXCEPTION.ILLEGAL_DATA_VALUE);
      }
      const values = Array.from({ length: count }, (_, i) => pdu.readUInt16BE(6 + 2 * i));
      const refused = device.write(addr, values, 16, now);
      return isRefusal(refused) ? exceptionPdu(fc, refused.exception) : pdu.subarray(0, 5);
    }
    default:
      return exceptionPdu(fc, EXCEPTION.ILLEGAL_FUNCTION);
  }
}
