/**
 * The port object modbus-serial's master talks through, for Modbus TCP.
 *
 * Why not modbus-serial's own TcpPort: it frames the byte stream by the MBAP length field
 * alone and keeps what is left over, so one truncated answer misframes every later one for
 * as long as the connection lives; and it passes up whatever carries a transaction id the
 * master once used, without comparing the echo of a write or the byte count of a read with
 * the request. Here, as in RtuPort, the receive buffer is emptied when a request is written
 * and after a timeout, and the answer is found by its header (this request's transaction
 * id, protocol 0) at any offset, so leftovers of an earlier answer are skipped. An answer
 * with the right transaction id that does not fit the request (unit, function, byte count,
 * echoed address, quantity or value, length) IS the device's answer, and a malformed one:
 * the port reports it at once ("malformed") instead of letting the transaction wait for
 * its timeout, and never passes it up as a value.
 */
import net from "node:net";
import { withCrc } from "../../../packages/protocol/src/rtu.ts";
import { AnswerPort, MalformedAnswerError, expectationFor, misfit, type Expectation } from "./framing.ts";

const MBAP_HEADER = 7;
/** The largest MBAP length field: unit id + a 253-byte PDU. */
const MAX_MBAP_LENGTH = 254;

export interface TcpLinkOptions {
  readonly host: string;
  readonly port: number;
}

type TcpExpectation = Expectation & { readonly tid: number };

export class TcpPort extends AnswerPort<TcpExpectation> {
  private socket: net.Socket | null = null;
  /** The MBAP transaction id of the request in progress (modbus-serial's own stays at 1). */
  private tid = 0;

  constructor(private readonly options: TcpLinkOptions) {
    super();
  }

  get isOpen(): boolean {
    return this.socket !== null && !this.socket.destroyed;
  }

  open(callback: (err: Error | null) => void): void {
    const socket = net.connect({ host: this.options.host, port: this.options.port, noDelay: true });
    const failed = (err: Error) => {
      socket.destroy();
      callback(err);
    };
    socket.once("error", failed);
    socket.once("connect", () => {
      socket.off("error", failed);
      this.socket = socket;
      socket.on("data", (chunk: Buffer) => this.onData(chunk));
      socket.on("error", (err) => this.emit("error", err));
      socket.on("close", () => {
        this.socket = null;
        this.emit("close");
      });
      callback(null);
    });
  }

  close(callback?: (err?: Error | null) => void): void {
    const socket = this.socket;
    if (!socket) {
      callback?.(null);
      return;
    }
    socket.once("close", () => callback?.(null));
    socket.destroy();
  }

  /** `data` is the RTU frame modbus-serial builds (unit, PDU, CRC); it goes out under an MBAP header. */
  write(data: Buffer): void {
    const expect = expectationFor(data);
    this.tid = (this.tid + 1) & 0xffff;
    this.awaitAnswer(expect === null ? null : { ...expect, tid: this.tid });
    const adu = Buffer.alloc(MBAP_HEADER - 1 + data.length - 2);
    adu.writeUInt16BE(this.tid, 0);
    adu.writeUInt16BE(0, 2);
    adu.writeUInt16BE(data.length - 2, 4);
    data.copy(adu, 6, 0, data.length - 2);
    this.socket?.write(adu);
  }

  protected scan(expect: TcpExpectation): void {
    for (let i = 0; i + MBAP_HEADER <= this.rx.length; i++) {
      const tid = this.rx.readUInt16BE(i);
      if (this.rx.readUInt16BE(i + 2) !== 0) continue;
      const length = this.rx.readUInt16BE(i + 4);
      if (tid !== expect.tid) {
        // A whole ADU of another transaction (a late answer): say so if this one times out.
        // Scanning on byte by byte, never past it: a false header must not hide the answer.
        if (length >= 2 && length <= MAX_MBAP_LENGTH && i + 6 + length <= this.rx.length)
          this.ignored ??= `an answer with transaction id ${tid} (expected ${expect.tid})`;
        continue;
      }
      if (length < 2 || length > MAX_MBAP_LENGTH) return this.finish(new MalformedAnswerError(`an answer with MBAP length ${length}`));
      if (i + 6 + length > this.rx.length) return; // the rest is still on its way
      const unit = this.rx[i + 6]!;
      const pdu = this.rx.subarray(i + MBAP_HEADER, i + 6 + length);
      const why = misfit(expect, unit, pdu);
      return this.finish(why === null ? withCrc(Buffer.concat([Buffer.from([unit]), pdu])) : new MalformedAnswerError(why));
    }
  }
}
