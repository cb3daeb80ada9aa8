/**
 * A programmable misbehaving Modbus slave, over Modbus TCP (a loopback server) or Modbus
 * RTU (the device end of a socat pty pair). It holds one table of 65,536 registers (read
 * with FC03 or FC04, written with FC06 or FC16) and answers like a correct device until a
 * test queues faults: an exception (after applying the write, or not), silence, a truncated
 * frame, a wrong transaction id, unit, function code or byte count, an FC16 echo of another
 * address or quantity. It records every request, so a test can also show what was NOT sent.
 *
 * Unlike the simulated actuator (firmware-bridge), it implements no profile: a test that
 * wants a fenced device writes the identity block itself ({@link fencedIdentity}).
 */
import net from "node:net";
import { openSerialPort } from "../../firmware-bridge/src/serial-port.ts";
import { RtuFramer } from "../../firmware-bridge/src/rtu-framer.ts";
import { withCrc } from "../../packages/protocol/src/rtu.ts";
import { PROFILE_ID, PROFILE_MAGIC, PROFILE_VERSION } from "../../packages/protocol/src/modbus-profile.ts";

export interface SlaveRequest {
  readonly unit: number;
  readonly fc: number;
  readonly address: number;
  /** Registers read or written. */
  readonly quantity: number;
  /** Values written (FC06, FC16). */
  readonly values: readonly number[];
}

/** What goes back for one request, before it is framed for the transport. */
export interface Answer {
  unit: number;
  pdu: Buffer;
  /** Added to the transaction id of a TCP answer. */
  tidDelta: number;
  /** Send only this many bytes of the framed answer (RTU frame with CRC, TCP ADU with header). */
  cut: number | null;
  /** Send nothing. */
  silent: boolean;
}

export interface Fault {
  /** Only requests with this function code (default: any). */
  readonly fc?: number;
  /** How many matching requests it spoils; -1: until cleared (default 1). */
  readonly times?: number;
  /** Carry out the request on the registers first, as a device that acted (default true). */
  readonly apply?: boolean;
  /** Turns the correct answer into the wrong one. */
  readonly spoil: (answer: Answer, request: SlaveRequest) => void;
}

/** Answer with Modbus exception `code`. */
export const exception = (code: number) => (a: Answer) => {
  a.pdu = Buffer.from([(a.pdu[0]! & 0x7f) | 0x80, code]);
};
/** Answer nothing. */
export const silence = () => (a: Answer) => {
  a.silent = true;
};
/** Send the first `bytes` bytes of the framed answer only. */
export const truncate = (bytes: number) => (a: Answer) => {
  a.cut = bytes;
};
/** Answer with another transaction id (TCP). */
export const wrongTransactionId =
  (delta = 1) =>
  (a: Answer) => {
    a.tidDelta = delta;
  };
export const wrongUnit = (unit: number) => (a: Answer) => {
  a.unit = unit;
};
export const wrongFunction = (fc: number) => (a: Answer) => {
  a.pdu = Buffer.from(a.pdu);
  a.pdu[0] = fc;
};
/**
 * A read's answer carrying `bytes` data bytes, with a byte count that says so: shorter or
 * longer than the registers asked for, yet a consistent frame.
 */
export const dataBytes = (bytes: number) => (a: Answer) => {
  const data = Buffer.alloc(bytes);
  a.pdu.copy(data, 0, 2, Math.min(a.pdu.length, 2 + bytes));
  a.pdu = Buffer.concat([a.pdu.subarray(0, 1), Buffer.from([bytes]), data]);
};
/** A read's answer whose byte count byte is `count` while the data stays as asked. */
export const byteCountField = (count: number) => (a: Answer) => {
  a.pdu = Buffer.from(a.pdu);
  a.pdu[1] = count;
};
/** A write's echo naming another address and/or quantity (FC16) or value (FC06). */
export const echo = (fields: { address?: number; quantity?: number }) => (a: Answer) => {
  a.pdu = Buffer.from(a.pdu);
  if (fields.address !== undefined) a.pdu.writeUInt16BE(fields.address, 1);
  if (fields.quantity !== undefined) a.pdu.writeUInt16BE(fields.quantity, 3);
};

/** The fenced profile's identity block (magic, profile, version, setpoint count) at register 0. */
export function fencedIdentity(
  setpointRegisters = 1,
  overrides: Partial<Record<"magic" | "profile" | "version" | "setpoints", number>> = {},
): number[] {
  return [
    overrides.magic ?? PROFILE_MAGIC,
    overrides.profile ?? PROFILE_ID.FENCED,
    overrides.version ?? PROFILE_VERSION,
    1, // device type
    1, // firmware version
    0,
    42, // serial number
    overrides.setpoints ?? setpointRegisters,
  ];
}

/** The two registers of an IEEE-754 float, high word first. */
export function f32Words(value: number): [number, number] {
  const b = Buffer.alloc(4);
  b.writeFloatBE(value);
  return [b.readUInt16BE(0), b.readUInt16BE(2)];
}

export interface SlaveOptions {
  /** Units answered (default [1]); requests for others get no answer. */
  readonly units?: readonly number[];
  /** TCP: the loopback port to listen on (default: a free one). */
  readonly port?: number;
}

export class MisbehavingSlave {
  readonly registers = new Uint16Array(65_536);
  readonly requests: SlaveRequest[] = [];
  private faults: (Fault & { left: number })[] = [];
  private readonly units: ReadonlySet<number>;
  private closeTransport: () => Promise<void> = async () => {};
  /** TCP: where it listens. */
  address: { host: string; port: number } | null = null;
  /** TCP: open connections (a test can watch the gateway reconnect). */
  connections = 0;
  accepted = 0;

  private constructor(options: SlaveOptions) {
    this.units = new Set(options.units ?? [1]);
  }

  static async tcp(options: SlaveOptions = {}): Promise<MisbehavingSlave> {
    const slave = new MisbehavingSlave(options);
    await slave.listenTcp(options.port ?? 0);
    return slave;
  }

  static async rtu(path: string, options: SlaveOptions = {}): Promise<MisbehavingSlave> {
    const slave = new MisbehavingSlave(options);
    await slave.openRtu(path);
    return slave;
  }

  set(address: number, words: readonly number[]): void {
    words.forEach((w, i) => (this.registers[address + i] = w & 0xffff));
  }

  get(address: number, count = 1): number[] {
    return [...this.registers.subarray(address, address + count)];
  }

  /** Queues a fault; faults are tried in the order queued. */
  fault(f: Fault): void {
    this.faults.push({ ...f, left: f.times ?? 1 });
  }

  clearFaults(): void {
    this.faults = [];
  }

  /** Requests of function `fc` (writes to `address`, if given) seen so far. */
  seen(fc: number, address?: number): SlaveRequest[] {
    return this.requests.filter((r) => r.fc === fc && (address === undefined || r.address === address));
  }

  private handle(unit: number, pdu: Buffer): Answer | null {
    if (!this.units.has(unit)) return null;
    const request = parse(unit, pdu);
    this.requests.push(request);
    const i = this.faults.findIndex((f) => f.fc === undefined || f.fc === request.fc);
    const fault = i >= 0 ? this.faults[i]! : undefined;
    if (fault && fault.left > 0 && --fault.left === 0) this.faults.splice(i, 1);
    const answer: Answer = {
      unit,
      pdu: fault?.apply === false ? Buffer.from([pdu[0]!]) : this.execute(request, pdu),
      tidDelta: 0,
      cut: null,
      silent: false,
    };
    fault?.spoil(answer, request);
    return answer;
  }

  /** What a correct device does and answers. */
  private execute(r: SlaveRequest, pdu: Buffer): Buffer {
    switch (r.fc) {
      case 3:
      case 4: {
        const out = Buffer.alloc(2 + 2 * r.quantity);
        out[0] = r.fc;
        out[1] = 2 * r.quantity;
        this.get(r.address, r.quantity).forEach((w, j) => out.writeUInt16BE(w, 2 + 2 * j));
        return out;
      }
      case 6:
      case 16:
        this.set(r.address, r.values);
        return Buffer.from(pdu.subarray(0, 5));
      default:
        return Buffer.from([r.fc | 0x80, 1]);
    }
  }

  private async listenTcp(port: number): Promise<void> {
    const sockets = new Set<net.Socket>();
    const server = net.createServer((socket) => {
      sockets.add(socket);
      this.connections++;
      this.accepted++;
      socket.setNoDelay(true);
      socket.on("error", () => socket.destroy());
      socket.on("close", () => {
        sockets.delete(socket);
        this.connections--;
      });
      let rx = Buffer.alloc(0);
      socket.on("data", (chunk: Buffer) => {
        rx = Buffer.concat([rx, chunk]);
        while (rx.length >= 7 && rx.length >= 6 + rx.readUInt16BE(4)) {
          const adu = rx.subarray(0, 6 + rx.readUInt16BE(4));
          rx = Buffer.from(rx.subarray(adu.length));
          const answer = this.handle(adu[6]!, adu.subarray(7));
          if (!answer || answer.silent) continue;
          const header = Buffer.alloc(7);
          header.writeUInt16BE((adu.readUInt16BE(0) + answer.tidDelta) & 0xffff, 0);
          header.writeUInt16BE(answer.pdu.length + 1, 4);
          header[6] = answer.unit;
          const out = Buffer.concat([header, answer.pdu]);
          socket.write(answer.cut === null ? out : out.subarray(0, answer.cut));
        }
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve());
    });
    this.address = { host: "127.0.0.1", port: (server.address() as net.AddressInfo).port };
    this.dropper = () => sockets.forEach((s) => s.destroy());
    this.closeTransport = () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      });
  }

  private dropper: () => void = () => {};

  /** Drops every open TCP connection (the gateway must reconnect). */
  dropConnections(): void {
    this.dropper();
  }

  private async openRtu(path: string): Promise<void> {
    const port = await openSerialPort({ path, baudRate: 115_200, parity: "even", stopBits: 1, dataBits: 8 });
    const framer = new RtuFramer({
      silenceMs: 3,
      onFrame: (frame) => {
        const answer = this.handle(frame[0]!, frame.subarray(1, frame.length - 2));
        if (!answer || answer.silent) return;
        const out = withCrc(Buffer.concat([Buffer.from([answer.unit]), answer.pdu]));
        port.write(answer.cut === null ? out : out.subarray(0, answer.cut));
      },
    });
    port.on("data", (chunk: Buffer) => framer.push(chunk));
    port.on("error", () => undefined); // a vanished pty: close() cleans up
    this.closeTransport = () =>
      new Promise<void>((resolve) => {
        framer.close();
        if (!port.isOpen) return resolve();
        port.close(() => resolve());
      });
  }

  close(): Promise<void> {
    return this.closeTransport();
  }
}

function parse(unit: number, pdu: Buffer): SlaveRequest {
  const fc = pdu[0] ?? 0;
  const address = pdu.length >= 3 ? pdu.readUInt16BE(1) : 0;
  if (fc === 6 && pdu.length >= 5) return { unit, fc, address, quantity: 1, values: [pdu.readUInt16BE(3)] };
  const quantity = pdu.length >= 5 ? pdu.readUInt16BE(3) : 0;
  if (fc === 16) {
    const values = Array.from({ length: quantity }, (_, j) => (pdu.length >= 8 + 2 * j ? pdu.readUInt16BE(6 + 2 * j) : 0));
    return { unit, fc, address, quantity, values };
  }
  return { unit, fc, address, quantity, values: [] };
}
