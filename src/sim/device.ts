/**
 * Simulated actuators and the DevicePort in front of them.
 *
 * The physical unit is the firmware bridge's own register-map logic (firmware-bridge/src/
 * device.ts) with simulated time, so the fenced profile's fence and its EEPROM are the real
 * reference algorithm, and a power cycle keeps exactly what that EEPROM kept. The port
 * speaks to it in registers the way src/adapters/modbus/device.ts does (one FC16 command
 * block per fenced write, the device seq counted per token by this gateway process), and
 * maps what the line does to outcomes the same way: a timeout is OUTCOME_UNKNOWN, an
 * exception by the adapter's table (src/adapters/modbus/exceptions.ts: 0x46
 * DEVICE_REJECTED, "not done" DEVICE_ERROR, the rest OUTCOME_UNKNOWN), a closed link
 * DEVICE_UNAVAILABLE. Like the bus, two timeouts in a row report the unit offline and the
 * next answer reports it online.
 */
import { Device, MemoryEeprom, PowerLoss, type Refusal } from "../../firmware-bridge/src/device.ts";
import {
  FENCED,
  FENCE_REFUSED_EXCEPTION,
  PLAIN,
  decodeFence,
  encodeCommandBlock,
  encodeFenceRaise,
  rawToPosition,
} from "../../packages/protocol/src/modbus-profile.ts";
import { exceptionOutcome } from "../adapters/modbus/exceptions.ts";
import type { Fence, Outcome, PointValues } from "../core/types.ts";
import type { DeviceCommand, DevicePort, FenceRaise } from "../shell/ports.ts";
import type { Prng } from "./prng.ts";
import type { World } from "./world.ts";

export interface LineFaults {
  /** One leg of a transaction takes 1..latencyMaxMs. */
  readonly latencyMaxMs: number;
  /** The device acted but its answer never arrived. */
  readonly pLostAnswer: number;
  /** A corrupted frame (either direction): dropped by CRC, seen as a timeout. */
  readonly pCrc: number;
  /** An accepted command block loses power after the EEPROM commit, before acting. */
  readonly pPowerLoss: number;
}

/** One physical actuator: outlives every gateway process. */
export class SimActuator {
  readonly device: Device;
  readonly eeprom = new MemoryEeprom();
  poweredOff = false;
  busDown = false;
  /** Called when a command takes effect (API token and seq), for the checker. */
  onApplied: (token: number, seq: number) => void = () => {};

  constructor(
    readonly id: string,
    readonly profile: "fenced" | "plain",
    private readonly world: World,
    unit: number,
  ) {
    this.device = new Device({ unit, profile, watchdogMs: 0, safePositionRaw: 0, rateRawPerS: 0 }, this.eeprom, world.nowMs);
  }

  /** Power off for `offMs`; the unit comes back with what its EEPROM kept. */
  powerCycle(offMs: number): void {
    if (this.poweredOff) return;
    this.poweredOff = true;
    this.world.after(offMs, () => {
      this.device.powerCycle(this.world.nowMs);
      this.poweredOff = false;
    });
  }

  /** A command block or setpoint write, as the unit executes it. */
  writeCommand(
    cmd: DeviceCommand,
    deviceSeq: number,
    nowMs: number,
    rng: Prng,
    faults: LineFaults,
    onPowerLoss: () => void,
  ): Refusal | undefined {
    const position = cmd.set.position ?? 0;
    const before = this.device.applied.length;
    let result: Refusal | undefined;
    if (this.profile === "fenced") {
      const block = encodeCommandBlock({ token: cmd.token, seq: deviceSeq, setpoints: { position } });
      if (rng.chance(faults.pPowerLoss)) this.device.crashAfterPersist = 1;
      try {
        result = this.device.write(FENCED.COMMAND_START, block, 16, nowMs);
      } catch (err) {
        if (!(err instanceof PowerLoss)) throw err;
        // The fence and setpoint are in EEPROM: the unit resumes them at power-up. It acted.
        this.onApplied(cmd.token, cmd.seq);
        onPowerLoss();
        this.powerCycle(rng.int(20, 300));
        return undefined;
      } finally {
        this.device.crashAfterPersist = 0;
      }
    } else {
      result = this.device.write(PLAIN.TARGET_POSITION, [Math.round(position * 100)], 16, nowMs);
    }
    if (this.device.applied.length > before) this.onApplied(cmd.token, cmd.seq);
    return result;
  }
}

class LineTimeout extends Error {
  constructor() {
    super("Timed out");
  }
}

class LinkDown extends Error {
  constructor(why = "the link to the device is down") {
    super(why);
  }
}

export interface PortHooks {
  /** Runs `fn` (an answer off the line) when the process that owns this port takes it: never once it died. */
  enter(fn: () => void): void;
  /** In a gateway group: may a frame be sent now? Asked before every one, as the bus asks the member. */
  permit?(): boolean;
  /** A write's frame is on the wire (in a group; alone, `beforeWrite` is that moment). */
  onFrame?(cmd: DeviceCommand): void;
  /** The bus's unit online/offline report. */
  onUnit(online: boolean): void;
  /** The gateway hands a command to the port: the moment it was accepted. */
  beforeWrite(cmd: DeviceCommand): void;
  /** Right after the unit acted on a command: the process may die here. */
  afterAct(): void;
  fault(kind: string): void;
}

const isRefusal = (x: unknown): x is Refusal => typeof x === "object" && x !== null && "exception" in x;

/** The gateway process's view of one actuator on a simulated line. */
export class SimDevicePort implements DevicePort {
  private chain: Promise<unknown> = Promise.resolve();
  private writeCounter = { token: 0, next: 0 };
  /** A gateway group's standby keeps its buses closed; closing drops what waits for the line. */
  private open = true;
  private online: boolean | null = null;
  private timeoutsInARow = 0;
  readonly timeoutMs: number;

  constructor(
    readonly unit: SimActuator,
    private readonly world: World,
    private readonly rng: Prng,
    private readonly faults: () => LineFaults,
    private readonly hooks: PortHooks,
  ) {
    this.timeoutMs = 2 * faults().latencyMaxMs + 10;
  }

  /** The bus opens (a gateway group's member becoming active) or closes (stepping down, or standing by). */
  setOpen(open: boolean): void {
    this.open = open;
    // A bus opened afresh reports its units anew, as the real one does: online at their first answer.
    if (!open) {
      this.online = null;
      this.timeoutsInARow = 0;
    }
  }

  async write(cmd: DeviceCommand): Promise<Outcome> {
    this.hooks.beforeWrite(cmd);
    // Like the real adapter: the device seq is this process's count of writes under the token.
    const deviceSeq = this.deviceSeqFor(cmd.token);
    try {
      const result = await this.transact(
        (nowMs) => {
          const r = this.unit.writeCommand(cmd, deviceSeq, nowMs, this.rng, this.faults(), () =>
            this.hooks.fault("device.powerLossMidCommand"),
          );
          if (r === undefined) this.hooks.afterAct();
          return r;
        },
        () => this.hooks.onFrame?.(cmd),
      );
      if (result === undefined) return { kind: "applied", applied: { position: cmd.set.position ?? 0 } };
      return { kind: "failed", ...exceptionOutcome(result.exception, this.unit.profile === "fenced"), modbusCode: result.exception };
    } catch (err) {
      if (err instanceof LinkDown)
        return { kind: "failed", code: "DEVICE_UNAVAILABLE", message: `The command was not sent: ${err.message}.` };
      return {
        kind: "failed",
        code: "OUTCOME_UNKNOWN",
        message: "The device did not confirm the write in time; it may or may not have acted, so re-read state.",
      };
    }
  }

  /** Fenced profile 1.1's FENCE_RAISE, as the Modbus adapter sends it: the next device seq under the token. */
  async raiseFence(token: number): Promise<FenceRaise> {
    if (this.unit.profile !== "fenced") return { kind: "unsupported", message: "A plain device keeps no fence of its own." };
    const seq = this.deviceSeqFor(token);
    try {
      const refused = await this.transact((nowMs) =>
        this.unit.device.write(FENCED.FENCE_RAISE_START, encodeFenceRaise(token, seq), 16, nowMs),
      );
      if (refused === undefined) return { kind: "raised" };
      if (refused.exception === FENCE_REFUSED_EXCEPTION)
        return {
          kind: "refused",
          message: `The device refused fence ${token}: it holds a newer token, so another gateway has taken over.`,
        };
      return { kind: "failed", message: `The fence raise was not confirmed: exception ${refused.exception}.` };
    } catch (err) {
      return { kind: "failed", message: `The fence raise was not confirmed: ${(err as Error).message}.` };
    }
  }

  private deviceSeqFor(token: number): number {
    if (this.writeCounter.token !== token) this.writeCounter = { token, next: 0 };
    return this.writeCounter.next++;
  }

  async read(): Promise<PointValues> {
    const fenced = this.unit.profile === "fenced";
    if (fenced) await this.transact((nowMs) => this.unit.device.write(FENCED.KEEPALIVE, [1], 6, nowMs));
    const regs = await this.transact((nowMs) => this.unit.device.read(fenced ? FENCED.TARGET_POSITION : PLAIN.TARGET_POSITION, 1, nowMs));
    if (isRefusal(regs)) throw new Error(`exception ${regs.exception}`);
    return { position: rawToPosition(regs[0] ?? 0) };
  }

  async readFence(): Promise<Fence | null> {
    if (this.unit.profile !== "fenced") return null;
    const regs = await this.transact((nowMs) => this.unit.device.read(FENCED.FENCE_START, FENCED.FENCE_COUNT, nowMs));
    if (isRefusal(regs)) throw new Error(`exception ${regs.exception}`);
    return { token: decodeFence(regs).token, seq: null };
  }

  /** One transaction at a time, as on the bus. A dead process's transactions never settle. */
  private transact<T>(atDevice: (nowMs: number) => T, onSent?: () => void): Promise<T> {
    const run = this.chain.then(() => this.once(atDevice, onSent));
    this.chain = run.catch(() => {});
    return run;
  }

  private once<T>(atDevice: (nowMs: number) => T, onSent?: () => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const { hooks, world, rng } = this;
      const faults = this.faults();
      const startMs = world.nowMs;
      const timeout = () =>
        world.at(startMs + this.timeoutMs, () =>
          hooks.enter(() => {
            this.report(false);
            reject(new LineTimeout());
          }),
        );
      if (!this.open || hooks.permit?.() === false) {
        reject(new LinkDown("this gateway may not drive the bus now (it is not the group's active gateway)"));
        return;
      }
      if (this.unit.busDown) {
        this.setOnline(false);
        reject(new LinkDown());
        return;
      }
      onSent?.();
      const requestMs = rng.int(1, faults.latencyMaxMs);
      const answerMs = rng.int(1, faults.latencyMaxMs);
      const crcOut = rng.chance(faults.pCrc);
      const crcBack = rng.chance(faults.pCrc);
      const lost = rng.chance(faults.pLostAnswer);
      world.after(requestMs, () => {
        // The request is on the wire: the unit acts on it whether or not its sender still lives.
        if (crcOut || this.unit.poweredOff) {
          if (crcOut) hooks.fault("line.crc");
          timeout();
          return;
        }
        const result = atDevice(world.nowMs);
        if (this.unit.poweredOff || crcBack || lost) {
          if (crcBack) hooks.fault("line.crc");
          else if (lost) hooks.fault("line.lostAnswer");
          timeout();
          return;
        }
        world.after(answerMs, () =>
          hooks.enter(() => {
            this.report(true);
            resolve(result);
          }),
        );
      });
    });
  }

  private report(answered: boolean): void {
    if (answered) {
      this.timeoutsInARow = 0;
      this.setOnline(true);
    } else if (++this.timeoutsInARow >= 2) {
      this.setOnline(false);
    }
  }

  private setOnline(online: boolean): void {
    if (this.online === online) return;
    this.online = online;
    this.hooks.onUnit(online);
  }
}
