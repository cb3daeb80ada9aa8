/**
 * The units on one bus (or behind one TCP endpoint) and the fault injection that sits between
 * them and the line. Transport-independent: takes (unit, request PDU), says what to send.
 */
import { Device, PowerLoss } from "./device.ts";
import type { DeviceConfig, DeviceSnapshot, Eeprom } from "./device.ts";
import { exceptionPdu, handlePdu } from "./pdu.ts";

/** Counted faults: how many of the next responses are affected; -1 = until cleared. */
export interface UnitFaults {
  delayMs: number;
  mute: boolean;
  drop: number;
  corrupt: number;
  exception: { code: number; count: number } | undefined;
  /**
   * When set, the counted faults (drop, corrupt, exception) hit only requests of this
   * function code: a test can lose the answer to a write without the gateway's polls
   * eating the fault first.
   */
  onlyFc: number | undefined;
}

function noFaults(): UnitFaults {
  return { delayMs: 0, mute: false, drop: 0, corrupt: 0, exception: undefined, onlyFc: undefined };
}

/** Consume one use of a counted fault; -1 never runs out. */
function take(n: number): [boolean, number] {
  if (n === 0) return [false, 0];
  return [true, n < 0 ? n : n - 1];
}

export interface Reply {
  /** Response PDU, or null for no answer (broadcast, mute, dropped, power loss). */
  readonly pdu: Buffer | null;
  /** Send it with a wrong CRC (RTU) / wrong transaction id (TCP). */
  readonly corrupt: boolean;
  readonly delayMs: number;
}

export interface StationCounters {
  requests: number;
  replies: number;
  badFrames: number;
  notForUs: number;
}

export class Station {
  private readonly units = new Map<number, { device: Device; faults: UnitFaults }>();
  readonly counters: StationCounters = { requests: 0, replies: 0, badFrames: 0, notForUs: 0 };

  constructor(
    configs: readonly DeviceConfig[],
    private readonly eeprom: Eeprom,
    private readonly clock: () => number,
    /** Sees every request, in the order the line carried them, before it is handled. */
    private readonly onRequest?: (unit: number, functionCode: number) => void,
  ) {
    for (const c of configs) this.units.set(c.unit, { device: new Device(c, eeprom, clock()), faults: noFaults() });
  }

  unitIds(): number[] {
    return [...this.units.keys()];
  }

  has(unit: number): boolean {
    return this.units.has(unit);
  }

  private get(unit: number) {
    const u = this.units.get(unit);
    if (!u) throw new RangeError(`no unit ${unit} on this simulator (units: ${this.unitIds().join(",")})`);
    return u;
  }

  device(unit: number): Device {
    return this.get(unit).device;
  }

  snapshot(unit: number): DeviceSnapshot {
    return this.get(unit).device.snapshot(this.clock());
  }

  faults(unit: number): UnitFaults {
    return this.get(unit).faults;
  }

  /** Units a fault command applies to: the one named, or all. */
  select(unit: number | undefined): number[] {
    return unit === undefined ? this.unitIds() : [this.get(unit).device.config.unit];
  }

  clearFaults(unit?: number): void {
    for (const id of this.select(unit)) {
      this.get(id).faults = noFaults();
      this.get(id).device.crashAfterPersist = 0;
    }
  }

  powerCycle(unit?: number): void {
    for (const id of this.select(unit)) {
      this.eeprom.reload?.(id);
      this.get(id).device.powerCycle(this.clock());
    }
  }

  /** One request for `unit` (0 = broadcast: every unit acts, nobody answers). */
  handle(unit: number, pdu: Buffer): Reply | null {
    this.counters.requests++;
    this.onRequest?.(unit, pdu[0] ?? 0);
    if (unit === 0) {
      for (const id of this.unitIds()) this.handleOne(id, pdu);
      return null;
    }
    if (!this.units.has(unit)) {
      this.counters.notForUs++;
      return null;
    }
    const reply = this.handleOne(unit, pdu);
    if (reply.pdu) this.counters.replies++;
    return reply;
  }

  private handleOne(unit: number, pdu: Buffer): Reply {
    const u = this.get(unit);
    const f = u.faults;
    const silent = (): Reply => ({ pdu: null, corrupt: false, delayMs: 0 });
    if (f.mute) return silent();
    const targeted = f.onlyFc === undefined || pdu[0] === f.onlyFc;
    if (f.exception && targeted) {
      const code = f.exception.code;
      const [, left] = take(f.exception.count);
      f.exception = left === 0 ? undefined : { code, count: left };
      return { pdu: exceptionPdu(pdu[0] ?? 0, code), corrupt: false, delayMs: f.delayMs };
    }
    let response: Buffer;
    try {
      response = handlePdu(u.device, pdu, this.clock());
    } catch (err) {
      if (!(err instanceof PowerLoss)) throw err;
      this.powerCycle(unit); // RAM lost; what the EEPROM made durable comes back
      return silent();
    }
    if (!targeted) return { pdu: response, corrupt: false, delayMs: f.delayMs };
    const [drop, dropLeft] = take(f.drop);
    f.drop = dropLeft;
    if (drop) return silent();
    const [corrupt, corruptLeft] = take(f.corrupt);
    f.corrupt = corruptLeft;
    return { pdu: response, corrupt, delayMs: f.delayMs };
  }
}
