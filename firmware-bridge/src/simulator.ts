/**
 * The simulated actuator as a running thing: station (units + faults) behind a transport
 * (Modbus RTU on a serial device via `serialport`, or Modbus TCP via `net`), an optional
 * control channel (JSON lines on a UNIX socket), and optional line-rate emulation.
 */
import fs from "node:fs";
import net from "node:net";
import { performance } from "node:perf_hooks";
import * as z from "zod";
import { MemoryEeprom } from "./device.ts";
import type { DeviceConfig, DeviceSnapshot, Eeprom, Profile } from "./device.ts";
import { POSITION_SCALE, PROFILE_VERSION_1_0, positionToRaw } from "../../packages/protocol/src/modbus-profile.ts";
import { RtuFramer } from "./rtu-framer.ts";
import { charsMs, t35Ms, withCrc } from "../../packages/protocol/src/rtu.ts";
import { openSerialPort } from "./serial-port.ts";
import { Station } from "./station.ts";
import type { Reply, StationCounters } from "./station.ts";
import { FileEeprom } from "./state.ts";

export type Parity = "none" | "even" | "odd";

export interface SerialOptions {
  readonly path: string;
  readonly baud?: number;
  readonly parity?: Parity;
  readonly stopBits?: 1 | 2;
}

export interface TcpOptions {
  readonly host?: string;
  /** 0 (default) picks a free port; read it from `handle.tcp`. */
  readonly port?: number;
}

export interface SimulatorOptions {
  /** Exactly one of serial and tcp. */
  readonly serial?: SerialOptions;
  readonly tcp?: TcpOptions;
  /** Unit ids 1..247 answered on this bus; default [1]. */
  readonly units?: readonly number[];
  readonly profile?: Profile;
  /** The fenced profile version to implement; default 1.1 (1.0 has no FENCE_RAISE block). */
  readonly profileVersion?: "1.0" | "1.1";
  /** The EEPROM file (all units in one JSON file). Without it the EEPROM lives in RAM. */
  readonly stateFile?: string;
  /** Saves are not durable until sync(); a power cycle loses them (test mode). */
  readonly loseUnsynced?: boolean;
  /** Communications-loss watchdog, ms (0 = off, default 0, max 65535). */
  readonly watchdogMs?: number;
  /** % (default 0). */
  readonly safePosition?: number;
  /** %/s (default 20; 0 = instantaneous). */
  readonly rate?: number;
  /** Time responses like a real RTU line at `baud` (also used for TCP, as if bridged to RTU). */
  readonly lineRate?: boolean;
  /** Baud for line-rate emulation on TCP (serial uses serial.baud). Default 115200. */
  readonly baud?: number;
  /** JSON-lines control socket path. */
  readonly control?: string;
  /** Monotonic ms clock; default performance.now. */
  readonly clock?: () => number;
  /** RTU silence that ends a frame, ms; default max(t3.5, 3). */
  readonly silenceMs?: number;
  /** Called with every request taken off the line, in order, before it is handled (tests watch the order of frames). */
  readonly onRequest?: (unit: number, functionCode: number) => void;
}

/** The control-channel commands (also accepted in-process by `handle.control`). */
export const ControlCommand = z.discriminatedUnion("op", [
  z.object({ op: z.literal("delay"), ms: z.number().min(0), unit: z.number().int().optional() }),
  z.object({ op: z.literal("mute"), on: z.boolean().default(true), unit: z.number().int().optional() }),
  z.object({
    op: z.literal("drop"),
    count: z.number().int().min(-1).default(1),
    unit: z.number().int().optional(),
    fc: z.number().int().min(1).max(127).optional(),
  }),
  z.object({
    op: z.literal("corrupt"),
    count: z.number().int().min(-1).default(1),
    unit: z.number().int().optional(),
    fc: z.number().int().min(1).max(127).optional(),
  }),
  z.object({
    op: z.literal("exception"),
    code: z.number().int().min(1).max(255),
    count: z.number().int().min(-1).default(1),
    unit: z.number().int().optional(),
    fc: z.number().int().min(1).max(127).optional(),
  }),
  z.object({ op: z.literal("crashAfterPersist"), count: z.number().int().min(0).default(1), unit: z.number().int().optional() }),
  z.object({ op: z.literal("powerCycle"), unit: z.number().int().optional() }),
  z.object({ op: z.literal("clear"), unit: z.number().int().optional() }),
  z.object({ op: z.literal("sync") }),
  z.object({ op: z.literal("device"), unit: z.number().int() }),
  z.object({ op: z.literal("counters") }),
]);
export type ControlCommand = z.input<typeof ControlCommand>;

export interface SimulatorHandle {
  readonly units: readonly number[];
  readonly profile: Profile;
  /** The TCP address actually bound (tcp transport only). */
  readonly tcp: { host: string; port: number } | undefined;
  readonly serial: string | undefined;
  readonly counters: StationCounters;
  /**
   * The last {@link ANSWER_TIMES_KEPT} answers written, oldest first: when the request was
   * taken and when its answer was written, on the simulator's own clock (performance.now()).
   * What line-rate emulation guarantees is checked against these, not against a master's
   * timers, which also count the pty, the event loops and timer coalescing.
   */
  readonly answerTimes: readonly AnswerTime[];
  /** State of a unit, including the log of every applied command. */
  device(unit: number): DeviceSnapshot;
  /** Run one control command; same protocol as the control socket. */
  control(cmd: ControlCommand): Record<string, unknown>;
  /** Fault injection; `unit` undefined = every unit. count -1 = until cleared. */
  setDelay(ms: number, unit?: number): void;
  mute(on?: boolean, unit?: number): void;
  /** `fc`: only answers to this function code are affected (e.g. 16, the command block). */
  dropResponses(count?: number, unit?: number, fc?: number): void;
  corruptCrc(count?: number, unit?: number, fc?: number): void;
  answerException(code: number, count?: number, unit?: number, fc?: number): void;
  crashAfterPersist(count?: number, unit?: number): void;
  powerCycle(unit?: number): void;
  clearFaults(unit?: number): void;
  /** lose-unsynced mode: make saved state durable now. */
  sync(): void;
  close(): Promise<void>;
}

export interface AnswerTime {
  readonly receivedAtMs: number;
  readonly sentAtMs: number;
}

export const ANSWER_TIMES_KEPT = 256;

interface Transport {
  close(): Promise<void>;
}

/** Runs `fn` at monotonic time `atMs` as precisely as the event loop allows (timer, then spin). */
function runAt(atMs: number, fn: () => void): void {
  const spin = () => (performance.now() >= atMs ? fn() : setImmediate(spin));
  const wait = atMs - performance.now() - 1.5;
  if (wait > 0) setTimeout(spin, wait);
  else spin();
}

/**
 * When each response may leave, for line-rate emulation (busy-until bookkeeping of one bus).
 * A request taken at `receivedAtMs` is taken to have started then (a pty delivers it at once),
 * or when the line's trailing t3.5 after the previous answer ends, if later. That silence
 * counts from when the previous answer was actually written, not from when it was due: under
 * load an answer leaves late, and counting from its due time would let the next one follow
 * it closer than a real line allows.
 */
class LineClock {
  private busyUntil = 0;
  private readonly t35: number;
  constructor(private readonly baud: number) {
    this.t35 = t35Ms(baud);
  }
  /** The response (respBytes, 0 = none) to a request of `reqBytes` taken at `receivedAtMs` leaves at the returned time. */
  schedule(receivedAtMs: number, reqBytes: number, respBytes: number): number {
    const start = Math.max(receivedAtMs, this.busyUntil);
    const reqEnd = start + charsMs(reqBytes, this.baud);
    const respEnd = respBytes > 0 ? reqEnd + this.t35 + charsMs(respBytes, this.baud) : reqEnd;
    this.busyUntil = respEnd + this.t35;
    return respEnd;
  }
  /** An answer was written at `sentAtMs`: nothing may start on the line before its trailing t3.5. */
  sent(sentAtMs: number): void {
    this.busyUntil = Math.max(this.busyUntil, sentAtMs + this.t35);
  }
}

function validUnit(u: number): number {
  if (!Number.isInteger(u) || u < 1 || u > 247) throw new RangeError(`unit ${u} is not in 1..247`);
  return u;
}

export async function startSimulator(options: SimulatorOptions): Promise<SimulatorHandle> {
  if (!options.serial === !options.tcp) throw new Error("startSimulator: give exactly one of serial, tcp");
  const clock = options.clock ?? (() => performance.now());
  const units = (options.units ?? [1]).map(validUnit);
  const profile = options.profile ?? "fenced";
  const watchdogMs = options.watchdogMs ?? 0;
  if (!Number.isInteger(watchdogMs) || watchdogMs < 0 || watchdogMs > 0xffff) throw new RangeError("watchdogMs must be 0..65535");
  const configs: DeviceConfig[] = units.map((unit) => ({
    unit,
    profile,
    watchdogMs,
    safePositionRaw: positionToRaw(options.safePosition ?? 0),
    rateRawPerS: Math.round((options.rate ?? 20) * POSITION_SCALE),
    ...(options.profileVersion === "1.0" ? { profileVersion: PROFILE_VERSION_1_0 } : {}),
  }));
  const fileEeprom = options.stateFile ? new FileEeprom(options.stateFile, options.loseUnsynced ?? false) : undefined;
  const eeprom: Eeprom = fileEeprom ?? new MemoryEeprom();
  const station = new Station(configs, eeprom, clock, options.onRequest);

  const baud = options.serial?.baud ?? options.baud ?? 115200;
  const line = options.lineRate ? new LineClock(baud) : undefined;

  const answerTimes: AnswerTime[] = [];
  const pacer: Pacer = {
    sendAt: (receivedAtMs, reqBytes, reply, respBytes) => {
      const base = line ? line.schedule(receivedAtMs, reqBytes, reply?.pdu ? respBytes : 0) : receivedAtMs;
      return base + (reply?.delayMs ?? 0);
    },
    sent: (receivedAtMs) => {
      const sentAtMs = performance.now();
      line?.sent(sentAtMs);
      if (answerTimes.push({ receivedAtMs, sentAtMs }) > ANSWER_TIMES_KEPT) answerTimes.shift();
    },
  };

  let transport: Transport;
  let tcpAddr: { host: string; port: number } | undefined;
  if (options.serial) transport = await startRtu(options.serial, station, pacer, options.silenceMs);
  else {
    const t = await startTcp(options.tcp ?? {}, station, pacer);
    transport = t;
    tcpAddr = t.address;
  }

  const run = (cmd: ControlCommand): Record<string, unknown> => {
    const c = ControlCommand.parse(cmd);
    const each = (unit: number | undefined, f: (u: number) => void) => station.select(unit).forEach(f);
    switch (c.op) {
      case "delay":
        each(c.unit, (u) => (station.faults(u).delayMs = c.ms));
        break;
      case "mute":
        each(c.unit, (u) => (station.faults(u).mute = c.on));
        break;
      case "drop":
        each(c.unit, (u) => Object.assign(station.faults(u), { drop: c.count, onlyFc: c.fc }));
        break;
      case "corrupt":
        each(c.unit, (u) => Object.assign(station.faults(u), { corrupt: c.count, onlyFc: c.fc }));
        break;
      case "exception":
        each(c.unit, (u) =>
          Object.assign(station.faults(u), { exception: c.count === 0 ? undefined : { code: c.code, count: c.count }, onlyFc: c.fc }),
        );
        break;
      case "crashAfterPersist":
        each(c.unit, (u) => (station.device(u).crashAfterPersist = c.count));
        break;
      case "powerCycle":
        station.powerCycle(c.unit);
        break;
      case "clear":
        station.clearFaults(c.unit);
        break;
      case "sync":
        fileEeprom?.sync();
        break;
      case "device":
        // `now`: the simulator's clock, the one the applied log's `at` is on (to line it up with others).
        return { ok: true, device: station.snapshot(c.unit), now: clock() };
      case "counters":
        return { ok: true, counters: { ...station.counters } };
    }
    return { ok: true };
  };

  const controlServer = options.control ? await startControl(options.control, run) : undefined;
  // The firmware's main loop: the watchdog trips (and is persisted) even when nobody reads.
  const ticker = setInterval(() => station.unitIds().forEach((u) => station.device(u).advance(clock())), 50);
  ticker.unref();

  let closed = false;
  return {
    units,
    profile,
    tcp: tcpAddr,
    serial: options.serial?.path,
    counters: station.counters,
    answerTimes,
    device: (unit) => station.snapshot(unit),
    control: run,
    setDelay: (ms, unit) => void run({ op: "delay", ms, unit }),
    mute: (on = true, unit) => void run({ op: "mute", on, unit }),
    dropResponses: (count = 1, unit, fc) => void run({ op: "drop", count, unit, fc }),
    corruptCrc: (count = 1, unit, fc) => void run({ op: "corrupt", count, unit, fc }),
    answerException: (code, count = 1, unit, fc) => void run({ op: "exception", code, count, unit, fc }),
    crashAfterPersist: (count = 1, unit) => void run({ op: "crashAfterPersist", count, unit }),
    powerCycle: (unit) => void run({ op: "powerCycle", unit }),
    clearFaults: (unit) => void run({ op: "clear", unit }),
    sync: () => void run({ op: "sync" }),
    close: async () => {
      if (closed) return;
      closed = true;
      clearInterval(ticker);
      await Promise.all([transport.close(), controlServer ? closeServer(controlServer, options.control) : undefined]);
    },
  };
}

/** Paces answers: when one may leave (line rate, fault delay), and the record of when it did. */
interface Pacer {
  sendAt(receivedAtMs: number, reqBytes: number, reply: Reply | null, respBytes: number): number;
  /** Call right after writing the answer to the request taken at `receivedAtMs`. */
  sent(receivedAtMs: number): void;
}

async function startRtu(opts: SerialOptions, station: Station, pacer: Pacer, silenceMs?: number): Promise<Transport> {
  const baud = opts.baud ?? 115200;
  const port = await openSerialPort({
    path: opts.path,
    baudRate: baud,
    dataBits: 8,
    parity: opts.parity ?? "even",
    stopBits: opts.stopBits ?? 1,
  });
  const framer = new RtuFramer({
    silenceMs: silenceMs ?? Math.max(t35Ms(baud), 3),
    onDrop: () => station.counters.badFrames++,
    onFrame: (frame) => {
      const receivedAtMs = performance.now();
      const unit = frame[0] ?? 0;
      const reply = station.handle(unit, frame.subarray(1, frame.length - 2));
      const out = reply?.pdu ? withCrc(Buffer.concat([Buffer.from([unit]), reply.pdu])) : undefined;
      const at = pacer.sendAt(receivedAtMs, frame.length, reply, out?.length ?? 0);
      if (!out || !reply) return;
      if (reply.corrupt) out[out.length - 1] = (out[out.length - 1] ?? 0) ^ 0xff;
      runAt(at, () => {
        if (!port.isOpen) return;
        port.write(out);
        pacer.sent(receivedAtMs);
      });
    },
  });
  port.on("data", (chunk: Buffer) => framer.push(chunk));
  port.on("error", () => undefined); // a vanished pty: keep the process alive, close() cleans up
  return {
    close: () =>
      new Promise<void>((resolve) => {
        framer.close();
        if (!port.isOpen) return resolve();
        port.close(() => resolve());
      }),
  };
}

async function startTcp(
  opts: TcpOptions,
  station: Station,
  pacer: Pacer,
): Promise<Transport & { address: { host: string; port: number } }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.setNoDelay(true);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let buf = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 7) {
        const len = buf.readUInt16BE(4);
        if (buf.readUInt16BE(2) !== 0 || len < 2 || len > 254) {
          socket.destroy(); // not Modbus TCP: a real device drops the connection
          return;
        }
        if (buf.length < 6 + len) return;
        const adu = buf.subarray(0, 6 + len);
        buf = Buffer.from(buf.subarray(6 + len));
        handleAdu(socket, adu);
      }
    });
  });
  const handleAdu = (socket: net.Socket, adu: Buffer) => {
    const receivedAtMs = performance.now();
    const tid = adu.readUInt16BE(0);
    const unit = adu[6] ?? 0;
    const pdu = adu.subarray(7);
    let reply = station.handle(unit, pdu);
    if (!reply && unit !== 0 && !station.has(unit)) {
      // behind a TCP endpoint an absent unit is a gateway target that did not answer
      reply = { pdu: Buffer.from([(pdu[0] ?? 0) | 0x80, 0x0b]), corrupt: false, delayMs: 0 };
    }
    // line-rate emulation on TCP: as if the TCP endpoint bridged to an RTU line (RTU sizes)
    const at = pacer.sendAt(receivedAtMs, pdu.length + 3, reply, reply?.pdu ? reply.pdu.length + 3 : 0);
    if (!reply?.pdu) return;
    const header = Buffer.alloc(7);
    header.writeUInt16BE(reply.corrupt ? tid ^ 0xffff : tid, 0);
    header.writeUInt16BE(0, 2);
    header.writeUInt16BE(reply.pdu.length + 1, 4);
    header[6] = unit;
    const out = Buffer.concat([header, reply.pdu]);
    runAt(at, () => {
      if (socket.destroyed) return;
      socket.write(out);
      pacer.sent(receivedAtMs);
    });
  };
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => resolve());
  });
  const a = server.address() as net.AddressInfo;
  return {
    address: { host: a.address, port: a.port },
    close: () => {
      for (const s of sockets) s.destroy();
      return closeServer(server);
    },
  };
}

async function startControl(socketPath: string, run: (cmd: ControlCommand) => Record<string, unknown>): Promise<net.Server> {
  fs.rmSync(socketPath, { force: true });
  const server = net.createServer((socket) => {
    let buf = "";
    socket.setEncoding("utf8");
    socket.on("error", () => socket.destroy());
    socket.on("data", (chunk: string) => {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line === "") continue;
        let answer: Record<string, unknown>;
        try {
          answer = run(JSON.parse(line) as ControlCommand);
        } catch (err) {
          answer = { ok: false, error: err instanceof z.ZodError ? z.prettifyError(err) : String((err as Error).message ?? err) };
        }
        socket.write(JSON.stringify(answer) + "\n");
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => resolve());
  });
  return server;
}

function closeServer(server: net.Server, unlinkPath?: string): Promise<void> {
  return new Promise((resolve) =>
    server.close(() => {
      if (unlinkPath) fs.rmSync(unlinkPath, { force: true });
      resolve();
    }),
  );
}

/**
 * Send one command to a simulator's control socket and return its JSON answer. The simulator
 * answers at once; a connection that stays silent for `timeoutMs` is given up with an error,
 * so a caller never waits on a stuck simulator for ever.
 */
export function sendControl(socketPath: string, cmd: ControlCommand, timeoutMs = 5000): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(socketPath);
    let buf = "";
    socket.setEncoding("utf8");
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no answer on the control socket within ${timeoutMs} ms`)));
    socket.on("error", reject);
    socket.on("close", () => reject(new Error("control socket closed without an answer")));
    socket.on("connect", () => socket.write(JSON.stringify(cmd) + "\n"));
    socket.on("data", (chunk: string) => {
      buf += chunk;
      const nl = buf.indexOf("\n");
      if (nl < 0) return;
      socket.end();
      try {
        resolve(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
      } catch (err) {
        reject(err as Error);
      }
    });
  });
}
