/**
 * Oversized MQTT packets dropped as they stream past, before mqtt.js's parser, which
 * buffers a packet whole before it looks at it: 200 MB published to a request topic took the
 * daemon from 99 to 492 MB resident, and `maxPayloadBytes` was checked only after that.
 *
 * `OversizedPacketFilter` frames the byte stream from the broker by the fixed header alone
 * (type, and the remaining length) and passes every packet up to the limit on untouched;
 * a larger one is skipped byte by byte without being kept, and reported, with its packet
 * identifier if it is a QoS 1 PUBLISH, so the gateway can still acknowledge it: a broker
 * waits for that PUBACK, and holding back acknowledgements would close its delivery window
 * to the gateway (Mosquitto's max_inflight_messages, 20 by default).
 *
 * The gateway does not announce the limit as an MQTT 5 Maximum Packet Size: Mosquitto 2.0
 * then drops a larger message for the gateway but never frees its delivery slot, so after
 * 20 such messages the gateway receives nothing more until it reconnects. Filtering here
 * works the same on MQTT 3.1.1 and 5 and with any broker.
 */
import { Duplex } from "node:stream";
import { MAX_CORRELATION_DATA_BYTES } from "./requests.ts";
import { MAX_RESPONSE_TOPIC_BYTES } from "../../../packages/protocol/src/index.ts";

/**
 * Room in a request packet for everything but the payload: the fixed header, the topic, the
 * packet identifier and the MQTT 5 properties (the response topic and the correlation data
 * at their limits, and 4 KiB for the rest: the topic, a content type, user properties).
 */
const REQUEST_PACKET_OVERHEAD_BYTES = 4096 + MAX_RESPONSE_TOPIC_BYTES + MAX_CORRELATION_DATA_BYTES;

/** The largest packet the gateway takes from the broker: a request of `maxPayloadBytes` with its overhead. */
export function maxPacketBytes(maxPayloadBytes: number): number {
  return maxPayloadBytes + REQUEST_PACKET_OVERHEAD_BYTES;
}

const PUBLISH = 3;

export interface DroppedPacket {
  /** The MQTT control packet type (3: PUBLISH). */
  readonly type: number;
  /** The whole packet's size in bytes, fixed header included. */
  readonly bytes: number;
  /** A QoS 1 or 2 PUBLISH's packet identifier, to acknowledge it; null otherwise. */
  readonly packetId: number | null;
  readonly qos: number;
}

export class MalformedPacketError extends Error {
  override readonly name = "MalformedPacketError";
}

interface Dropping {
  readonly type: number;
  readonly qos: number;
  readonly bytes: number;
  /** Body bytes skipped so far. */
  seen: number;
  firstTopicLengthByte: number;
  topicLength: number | null;
  firstPacketIdByte: number;
  packetId: number | null;
}

/**
 * The framing state machine. Pure: chunks in, the chunks to pass on out (the input
 * chunk itself when nothing in it was dropped), dropped packets reported to `onDropped`
 * once they have gone by.
 */
export class OversizedPacketFilter {
  private state: "header" | "pass" | "drop" = "header";
  /** The fixed header of the packet being framed, while incomplete (at most 5 bytes). */
  private header: number[] = [];
  /** Body bytes of the current packet still to come. */
  private left = 0;
  private dropping: Dropping | null = null;

  constructor(
    readonly maxPacketBytes: number,
    private readonly onDropped: (packet: DroppedPacket) => void,
  ) {}

  feed(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    // Start, in this chunk, of the bytes being passed on; -1 while none are.
    let runStart = this.state === "pass" ? 0 : -1;
    // Start, in this chunk, of the header being framed; -1 if it began in an earlier chunk.
    let headerStart = -1;
    let i = 0;
    while (i < chunk.length) {
      if (this.state === "pass") {
        const n = Math.min(this.left, chunk.length - i);
        i += n;
        this.left -= n;
        if (this.left === 0) this.state = "header";
        continue;
      }
      if (this.state === "drop") {
        i += this.skip(chunk, i);
        continue;
      }
      if (this.header.length === 0) headerStart = i;
      this.header.push(chunk[i++]!);
      const remaining = remainingLength(this.header);
      if (remaining === null) continue;
      const first = this.header[0]!;
      const bytes = this.header.length + remaining;
      if (bytes <= this.maxPacketBytes) {
        if (headerStart === -1) {
          out.push(Buffer.from(this.header));
          runStart = i;
        } else if (runStart === -1) {
          runStart = headerStart;
        }
        this.state = remaining === 0 ? "header" : "pass";
        this.left = remaining;
      } else {
        if (runStart !== -1 && headerStart !== -1) out.push(chunk.subarray(runStart, headerStart));
        runStart = -1;
        const type = first >> 4;
        this.dropping = {
          type,
          qos: type === PUBLISH ? (first >> 1) & 3 : 0,
          bytes,
          seen: 0,
          firstTopicLengthByte: 0,
          topicLength: null,
          firstPacketIdByte: 0,
          packetId: null,
        };
        this.state = "drop";
        this.left = remaining;
      }
      this.header = [];
      headerStart = -1;
    }
    if (runStart !== -1) {
      // A header begun at the end of this chunk is kept back until it is complete.
      const end = this.header.length > 0 && headerStart !== -1 ? headerStart : chunk.length;
      if (end > runStart) out.push(runStart === 0 && end === chunk.length ? chunk : chunk.subarray(runStart, end));
    }
    return out;
  }

  /** Skips the dropped packet's bytes in `chunk` from `at`; returns how many. */
  private skip(chunk: Buffer, at: number): number {
    const d = this.dropping!;
    const n = Math.min(this.left, chunk.length - at);
    if (d.type === PUBLISH && d.qos > 0) {
      // Body: topic length (2 bytes), topic, packet identifier (2 bytes), [properties], payload.
      const capture = (offset: number, set: (byte: number) => void) => {
        if (offset >= d.seen && offset < d.seen + n) set(chunk[at + offset - d.seen]!);
      };
      capture(0, (b) => (d.firstTopicLengthByte = b));
      capture(1, (b) => (d.topicLength = (d.firstTopicLengthByte << 8) | b));
      const idAt = d.topicLength === null ? -1 : d.topicLength + 2;
      capture(idAt, (b) => (d.firstPacketIdByte = b));
      capture(idAt + 1, (b) => (d.packetId = (d.firstPacketIdByte << 8) | b));
    }
    d.seen += n;
    this.left -= n;
    if (this.left === 0) {
      this.state = "header";
      this.dropping = null;
      this.onDropped({ type: d.type, bytes: d.bytes, qos: d.qos, packetId: d.packetId });
    }
    return n;
  }
}

/**
 * The remaining length of a fixed header (type byte, then a variable byte integer), or null
 * while more bytes are needed. Throws on a fifth length byte: no MQTT packet has one.
 */
function remainingLength(header: readonly number[]): number | null {
  let value = 0;
  for (let k = 1; k < header.length; k++) {
    const byte = header[k]!;
    value += (byte & 0x7f) * 128 ** (k - 1);
    if ((byte & 0x80) === 0) return value;
    if (k === 4) throw new MalformedPacketError("a packet's remaining length runs past four bytes");
  }
  return null;
}

/** PUBACK for `packetId`; over MQTT 5 with reason 0x83, "implementation specific error": not accepted. */
export function pubackPacket(packetId: number, v5: boolean): Buffer {
  const id = [packetId >> 8, packetId & 0xff];
  return Buffer.from(v5 ? [0x40, 0x03, ...id, 0x83] : [0x40, 0x02, ...id]);
}

/**
 * The broker connection as mqtt.js sees it: writes go to `socket` as they are (corked
 * writes leave as one), reads come through an {@link OversizedPacketFilter}. Closing either
 * side closes both.
 */
export class GuardedStream extends Duplex {
  private readonly framing: OversizedPacketFilter;

  constructor(
    readonly socket: Duplex,
    maxPacketBytesAllowed: number,
    onDropped: (packet: DroppedPacket, socket: Duplex) => void,
  ) {
    // Strings (topics, payloads) arrive as they are and are encoded once, into the one
    // buffer of the write, not each into a buffer of its own first.
    super({ allowHalfOpen: false, decodeStrings: false });
    this.framing = new OversizedPacketFilter(maxPacketBytesAllowed, (p) => onDropped(p, socket));
    socket.on("data", (chunk: Buffer) => {
      let parts: Buffer[];
      try {
        parts = this.framing.feed(chunk);
      } catch (err) {
        this.destroy(err as Error);
        return;
      }
      for (const part of parts) if (!this.push(part)) socket.pause();
    });
    socket.on("end", () => this.push(null));
    socket.on("error", (err) => this.destroy(err));
    socket.on("close", () => this.destroy());
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer | string, encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    this._writev([{ chunk, encoding }], done);
  }

  override _writev(chunks: { chunk: Buffer | string; encoding: BufferEncoding }[], done: (err?: Error | null) => void): void {
    // One buffer, one write: mqtt-packet writes each packet in many small pieces (header,
    // lengths, topic, properties, payload), and a turn's corked packets were a writev of
    // a hundred pieces, each through the socket's Writable first. Copying them is cheaper.
    let size = 0;
    for (const { chunk, encoding } of chunks) size += typeof chunk === "string" ? Buffer.byteLength(chunk, encoding) : chunk.length;
    const buffer = Buffer.allocUnsafe(size);
    let at = 0;
    for (const { chunk, encoding } of chunks) at += typeof chunk === "string" ? buffer.write(chunk, at, encoding) : chunk.copy(buffer, at);
    if (this.socket.write(buffer)) done();
    else this.socket.once("drain", () => done());
  }

  override _final(done: (err?: Error | null) => void): void {
    this.socket.end(done);
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.socket.destroy();
    done(err);
  }
}
