import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  MalformedPacketError,
  OversizedPacketFilter,
  pubackPacket,
  type DroppedPacket,
} from "../../../../src/adapters/mqtt/packet-guard.ts";

/** The variable byte integer of MQTT's fixed header. */
function remainingLength(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    out.push(byte);
  } while (n > 0);
  return out;
}

/** An MQTT 3.1.1 PUBLISH (an MQTT 5 one when `v5`: an empty property list after the packet id). */
function publish(topic: string, payloadBytes: number, qos: 0 | 1, packetId = 0, v5 = false): Buffer {
  const t = Buffer.from(topic);
  const body = Buffer.concat([
    Buffer.from([t.length >> 8, t.length & 0xff]),
    t,
    qos > 0 ? Buffer.from([packetId >> 8, packetId & 0xff]) : Buffer.alloc(0),
    v5 ? Buffer.from([0]) : Buffer.alloc(0),
    Buffer.alloc(payloadBytes, 0x61),
  ]);
  return Buffer.concat([Buffer.from([0x30 | (qos << 1), ...remainingLength(body.length)]), body]);
}

/** A PUBLISH of exactly `bytes` bytes in all (fixed header included). */
function publishOfSize(bytes: number, qos: 0 | 1, packetId = 7): Buffer {
  let payload = bytes - publish("a/b", 0, qos, packetId).length;
  while (publish("a/b", payload, qos, packetId).length > bytes) payload--;
  const p = publish("a/b", payload, qos, packetId);
  expect(p.length).toBe(bytes);
  return p;
}

function run(limit: number, chunks: Buffer[]): { passed: Buffer; dropped: DroppedPacket[] } {
  const dropped: DroppedPacket[] = [];
  const filter = new OversizedPacketFilter(limit, (p) => dropped.push(p));
  const out = chunks.flatMap((c) => filter.feed(c));
  return { passed: Buffer.concat(out), dropped };
}

const LIMIT = 1000;
const PINGRESP = Buffer.from([0xd0, 0x00]);

describe("OversizedPacketFilter", () => {
  it("passes a packet of exactly the limit, and the very chunk it came in", () => {
    const packet = publishOfSize(LIMIT, 1);
    const filter = new OversizedPacketFilter(LIMIT, () => expect.unreachable());
    const out = filter.feed(packet);
    expect(out).toHaveLength(1);
    expect(out[0]).toBe(packet);
  });

  it("drops a packet one byte past the limit, unread, and reports its packet id", () => {
    const { passed, dropped } = run(LIMIT, [publishOfSize(LIMIT + 1, 1, 513)]);
    expect(passed.length).toBe(0);
    expect(dropped).toEqual([{ type: 3, qos: 1, bytes: LIMIT + 1, packetId: 513 }]);
  });

  it("reports no packet id for a QoS 0 PUBLISH or another packet type", () => {
    const pubrel = Buffer.concat([Buffer.from([0x62, ...remainingLength(2000)]), Buffer.alloc(2000)]);
    const { dropped } = run(LIMIT, [publishOfSize(LIMIT + 1, 0), pubrel]);
    expect(dropped).toEqual([
      { type: 3, qos: 0, bytes: LIMIT + 1, packetId: null },
      { type: 6, qos: 0, bytes: 2003, packetId: null },
    ]);
  });

  it("finds the packet id behind a long topic of an MQTT 5 PUBLISH", () => {
    const { dropped } = run(LIMIT, [publish(`t/${"x".repeat(700)}`, 600, 1, 65_535, true)]);
    expect(dropped).toMatchObject([{ type: 3, qos: 1, packetId: 65_535 }]);
  });

  it("keeps a 60 MB packet's bytes nowhere: what passes is only the packets around it", () => {
    const before = publishOfSize(200, 1, 1);
    const after = Buffer.concat([PINGRESP, publishOfSize(300, 1, 3)]);
    const big = publish("fencegate/valve-1/read", 60_000_000, 1, 2);
    const chunks = [
      before,
      big.subarray(0, 5),
      ...Array.from({ length: 916 }, (_, k) => big.subarray(5 + k * 65_536, Math.min(big.length, 5 + (k + 1) * 65_536))),
      after,
    ];
    const { passed, dropped } = run(LIMIT, chunks);
    expect(passed.equals(Buffer.concat([before, after]))).toBe(true);
    expect(dropped).toEqual([{ type: 3, qos: 1, bytes: big.length, packetId: 2 }]);
  });

  it("frames the same way whatever the chunking (fixed headers split included)", () => {
    const stream = [
      PINGRESP,
      publishOfSize(LIMIT, 1, 1),
      publishOfSize(LIMIT + 1, 1, 2),
      publish("x", 0, 0),
      publishOfSize(5000, 1, 3),
      publishOfSize(20_000, 0),
      PINGRESP,
      publishOfSize(17, 1, 4),
    ];
    const whole = Buffer.concat(stream);
    const expected = Buffer.concat([stream[0]!, stream[1]!, stream[3]!, stream[6]!, stream[7]!]);
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 1, max: whole.length - 1 }), { maxLength: 40 }), (cuts) => {
        const points = [0, ...cuts.sort((a, b) => a - b), whole.length];
        const chunks = points.slice(1).map((end, k) => whole.subarray(points[k], end));
        const { passed, dropped } = run(LIMIT, chunks);
        expect(passed.equals(expected)).toBe(true);
        expect(dropped.map((d) => d.packetId)).toEqual([2, 3, null]);
      }),
    );
    // One byte at a time: every header split at every place.
    const { passed } = run(
      LIMIT,
      [...whole].map((b) => Buffer.from([b])),
    );
    expect(passed.equals(expected)).toBe(true);
  });

  it("refuses a remaining length longer than four bytes", () => {
    const filter = new OversizedPacketFilter(LIMIT, () => {});
    expect(() => filter.feed(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]))).toThrow(MalformedPacketError);
  });
});

describe("pubackPacket", () => {
  it("acknowledges the packet id, with reason 0x83 over MQTT 5", () => {
    expect([...pubackPacket(0x1234, false)]).toEqual([0x40, 0x02, 0x12, 0x34]);
    expect([...pubackPacket(0x1234, true)]).toEqual([0x40, 0x03, 0x12, 0x34, 0x83]);
  });
});
