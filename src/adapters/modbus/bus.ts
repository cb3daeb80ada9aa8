/**
 * One Modbus bus (an RS-485 line behind a serial adapter, or a Modbus TCP connection):
 * exclusive ownership, one transaction at a time, commands ahead of polls and round-robin
 * between the units on it ({@link BusQueue} has the rule), a per-transaction timeout, and
 * reopening with backoff when the link goes away.
 * It never throws the daemon out because a device or adapter disappeared.
 *
 * A unit's health: requests that got no usable answer (a timeout, or a malformed answer)
 * count against it; after `offlineAfterFailures` in a row it is reported offline, with the
 * reason, until it answers properly again. A Modbus exception is an answer: the unit is there.
 * A unit that has not answered once since the bus was started is offline from the start, so
 * no change reports it: a warning names it after `offlineAfterFailures` requests and again at
 * most every `silentUnitWarnEveryMs` while it stays silent: a miswired device is otherwise silent.
 */
import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import ModbusSerial from "modbus-serial";
import { DeviceAnswerError } from "../../shell/ports.ts";
import { BusQueue, type TransactionClass } from "./bus-queue.ts";
import { openFailure } from "./open-failure.ts";
import { RtuPort, type RtuLineOptions } from "./rtu-port.ts";
import { TcpPort } from "./tcp-port.ts";

const ModbusRTU = ModbusSerial.default;
export type ModbusClient = InstanceType<typeof ModbusRTU>;

export type BusLink =
  { readonly kind: "rtu"; readonly line: RtuLineOptions } | { readonly kind: "tcp"; readonly host: string; readonly port: number };

/**
 * The offline rule: a unit is reported offline after this many requests in a row without a
 * usable answer (a timeout, a malformed answer), and online again at its first answer. Two,
 * not one: a single lost frame on a noisy RS-485 line is not an outage (docs/mqtt-api.md).
 */
export const OFFLINE_AFTER_FAILURES = 2;

export interface BusOptions {
  readonly name: string;
  readonly link: BusLink;
  readonly timeoutMs: number;
  readonly reopenMinMs: number;
  readonly reopenMaxMs: number;
  /** After a timeout the line must be this quiet before the next request (late replies). */
  readonly quietAfterTimeoutMs: number;
  /** Requests in a row without a usable answer (timeouts, malformed answers) after which a unit is reported offline. */
  readonly offlineAfterFailures: number;
  /** A unit that has never answered is warned about at most this often (default {@link SILENT_UNIT_WARN_EVERY_MS}). */
  readonly silentUnitWarnEveryMs?: number;
  /** Bound on transactions waiting per unit, for each class (commands, polls). */
  readonly queueLimitPerUnit: number;
  /**
   * Gateway group: whether a frame may go out now, asked right before each transaction. A
   * gateway whose self-fencing deadline has passed sends nothing, even before its timer fires.
   */
  readonly permit?: () => boolean;
}

const SILENT_UNIT_WARN_EVERY_MS = 60_000;

/** The link is down: the request was never sent. */
export class LinkDownError extends Error {
  override readonly name = "LinkDownError";
}
/** Too many transactions already wait for this unit. */
export class BusBusyError extends Error {
  override readonly name = "BusBusyError";
}

/** No answer came within the bus timeout; the message says what the line carried instead, if anything. */
class TransactionTimeoutError extends Error {
  override readonly name = "TransactionTimeoutError";
  readonly errno = "ETIMEDOUT";
}

export function isTimeout(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { errno?: string }).errno === "ETIMEDOUT";
}

export function modbusExceptionCode(err: unknown): number | undefined {
  const code = (err as { modbusCode?: unknown } | null)?.modbusCode;
  return typeof code === "number" ? code : undefined;
}

interface Job {
  readonly run: (client: ModbusClient) => Promise<unknown>;
  readonly resolve: (v: unknown) => void;
  readonly reject: (e: unknown) => void;
}

export declare interface ModbusBus {
  on(event: "unit", listener: (unit: number, online: boolean, reason: string | null) => void): this;
  on(event: "link", listener: (up: boolean) => void): this;
  on(
    event: "transaction",
    listener: (unit: number, seconds: number, result: "ok" | "exception" | "timeout" | "malformed" | "error") => void,
  ): this;
}

export class ModbusBus extends EventEmitter {
  private client: ModbusClient | null = null;
  private port: RtuPort | TcpPort | null = null;
  /** Ends the transaction in progress at once: its port saw a malformed answer. */
  private failCurrent: ((err: unknown) => void) | null = null;
  private readonly queue: BusQueue<Job>;
  private readonly units: number[] = [];
  private busy = false;
  private up = false;
  private closed = false;
  private reopenDelayMs: number;
  private reopenTimer: NodeJS.Timeout | null = null;
  private readonly failures = new Map<number, number>();
  private readonly online = new Map<number, boolean>();
  /** Units that have answered since the bus was started. */
  private readonly answered = new Set<number>();
  /** Per unit that has never answered: when it was last warned about (performance.now()). */
  private readonly silentWarnedAtMs = new Map<number, number>();
  /** Per unit: rises whenever the unit may have been replaced (the link reopened, the unit went silent). */
  private readonly sessions = new Map<number, number>();
  private quietUntil = 0;
  /** An open in progress, until its callback has run (and, once closed, its port is closed). */
  private opening: Promise<void> | null = null;
  /** Counts close(): a transaction, a timer or an open from before one belongs to a closed generation. */
  private generation = 0;

  constructor(
    readonly options: BusOptions,
    private readonly log: Logger,
  ) {
    super();
    this.reopenDelayMs = options.reopenMinMs;
    this.queue = new BusQueue(options.queueLimitPerUnit);
  }

  addUnit(unit: number): void {
    if (!this.queue.has(unit)) {
      this.queue.addUnit(unit);
      this.units.push(unit);
      this.online.set(unit, false);
    }
  }

  get isUp(): boolean {
    return this.up;
  }

  isUnitOnline(unit: number): boolean {
    return this.online.get(unit) ?? false;
  }

  /**
   * A number that changes whenever the device behind `unit` may have changed since: the
   * link was reopened, or the unit stopped answering. What was learnt about the device
   * (its identity, its setpoints) holds only within one session.
   */
  session(unit: number): number {
    return this.sessions.get(unit) ?? 0;
  }

  /** Opens the link; after {@link close}, opens it again (a gateway group's standby becoming active). */
  start(): void {
    this.closed = false;
    this.open();
  }

  /** Runs one transaction for `unit` when the bus is free and it is that transaction's turn (commands before polls). */
  transact<T>(unit: number, kind: TransactionClass, run: (client: ModbusClient) => Promise<T>): Promise<T> {
    if (!this.up || this.closed) return Promise.reject(new LinkDownError(`bus ${this.options.name} is down`));
    if (!this.queue.has(unit)) return Promise.reject(new Error(`unit ${unit} is not on bus ${this.options.name}`));
    return new Promise<T>((resolve, reject) => {
      const queued = this.queue.push(unit, kind, { run, resolve: resolve as (v: unknown) => void, reject });
      if (!queued.queued)
        return reject(new BusBusyError(`unit ${unit} has ${queued.waiting} ${kind === "poll" ? "polls" : "commands"} waiting`));
      this.pump();
    });
  }

  private pump(): void {
    // Without a client nothing may leave the queue: a job taken off it would never settle.
    if (this.busy || !this.up || !this.client) return;
    const generation = this.generation;
    const wait = this.quietUntil - performance.now();
    if (wait > 0) {
      this.busy = true;
      setTimeout(() => {
        if (generation !== this.generation) return;
        this.busy = false;
        this.afterQuiet();
      }, Math.ceil(wait));
      return;
    }
    let next = this.queue.next();
    while (next && this.options.permit && !this.options.permit()) {
      next.job.reject(new LinkDownError(`this gateway may not drive bus ${this.options.name} now (it is not the group's active gateway)`));
      next = this.queue.next();
    }
    if (!next) return;
    const { unit, job } = next;
    this.busy = true;
    const startedMs = performance.now();
    const done = (result: "ok" | "exception" | "timeout" | "malformed" | "error") => {
      this.emit("transaction", unit, (performance.now() - startedMs) / 1000, result);
    };
    // A transaction of a session closed since settles its caller and touches nothing else.
    const current = () => generation === this.generation;
    const malformed = new Promise<never>((_, reject) => (this.failCurrent = reject));
    Promise.race([job.run(this.client), malformed])
      .then(
        (value) => {
          if (current()) {
            done("ok");
            this.noteAnswer(unit);
          }
          job.resolve(value);
        },
        (err: unknown) => {
          if (!current()) {
            // ignore: the bus was closed (and maybe opened again) meanwhile
          } else if (isTimeout(err)) {
            done("timeout");
            const ignored = this.port?.ignored;
            const why = `no answer within ${this.options.timeoutMs} ms${ignored ? `; the ${this.options.link.kind === "rtu" ? "line" : "connection"} carried ${ignored} instead` : ""}`;
            this.quietUntil = performance.now() + this.options.quietAfterTimeoutMs;
            this.noteFailure(unit, why);
            job.reject(new TransactionTimeoutError(`Timed out: ${why}`));
            return;
          }
          if (err instanceof DeviceAnswerError) {
            done("malformed");
            this.noteFailure(unit, `a malformed answer: ${err.message}`);
          } else if (modbusExceptionCode(err) !== undefined) {
            done("exception"); // still an answer: the unit is there
            this.noteAnswer(unit);
          } else {
            done("error");
          }
          job.reject(err);
        },
      )
      .finally(() => {
        if (!current()) return;
        this.failCurrent = null;
        this.busy = false;
        this.pump();
      });
  }

  /** After a timeout: wait until the line has been quiet long enough, then drop what came. */
  private afterQuiet(): void {
    const port = this.port;
    if (port) {
      const quietFor = performance.now() - port.lastByteAtMs;
      if (quietFor < this.options.quietAfterTimeoutMs) {
        this.quietUntil = performance.now() + (this.options.quietAfterTimeoutMs - quietFor);
        this.pump();
        return;
      }
      port.discardInput();
    }
    this.pump();
  }

  private noteFailure(unit: number, why: string): void {
    const n = (this.failures.get(unit) ?? 0) + 1;
    this.failures.set(unit, n);
    if (n < this.options.offlineAfterFailures) return;
    this.setUnit(unit, false, `unit ${unit} gave no usable answer to ${n} requests in a row (the last: ${why})`);
    if (!this.answered.has(unit)) this.warnSilent(unit, n, why);
  }

  private warnSilent(unit: number, requests: number, why: string): void {
    const now = performance.now();
    const last = this.silentWarnedAtMs.get(unit);
    if (last !== undefined && now - last < (this.options.silentUnitWarnEveryMs ?? SILENT_UNIT_WARN_EVERY_MS)) return;
    this.silentWarnedAtMs.set(unit, now);
    const { name, timeoutMs, link } = this.options;
    const check =
      link.kind === "rtu" ? "the unit address, the A/B wiring, the baud rate and parity" : "the unit id and the device's address";
    this.log.warn(
      { unit, timeoutMs, requests, reason: why },
      `unit ${unit} on bus ${name} has not answered since the bus opened (${requests} requests, ${timeoutMs} ms each); check ${check}`,
    );
  }

  private noteAnswer(unit: number): void {
    this.failures.set(unit, 0);
    this.answered.add(unit);
    this.silentWarnedAtMs.delete(unit);
    this.setUnit(unit, true, null);
  }

  private setUnit(unit: number, online: boolean, reason: string | null): void {
    if (this.online.get(unit) === online) return;
    this.online.set(unit, online);
    if (!online) this.sessions.set(unit, this.session(unit) + 1);
    if (online) this.log.info({ unit }, "unit answering");
    else this.log.warn({ unit, reason }, "unit not answering");
    this.emit("unit", unit, online, reason);
  }

  private open(): void {
    if (this.closed) return;
    const generation = this.generation;
    const { link } = this.options;
    const port = link.kind === "rtu" ? new RtuPort(link.line) : new TcpPort(link);
    port.on("malformed", (err: unknown) => this.failCurrent?.(err));
    this.port = port;
    const client = new ModbusRTU(port as never);
    let settled: () => void = () => {};
    this.opening = new Promise<void>((resolve) => (settled = resolve));
    const onOpen = (err: unknown) => {
      if (this.closed || generation !== this.generation) {
        // close() waits for this: the port (and its lock) must be free once close() returns.
        client.close(() => settled());
        return;
      }
      this.opening = null;
      settled();
      if (err) {
        const { reason, hint } = openFailure(err, this.options.name, this.options.link);
        this.log.warn({ err: reason, hint, retryInMs: this.reopenDelayMs }, "cannot open the bus; retrying");
        this.scheduleReopen();
        return;
      }
      client.setTimeout(this.options.timeoutMs);
      // Only about the current connection: a closed one's late events must not take down its successor.
      client.on("close", () => this.client === client && this.lost("closed"));
      client.on("error", (e: unknown) => this.client === client && this.lost(String(e)));
      this.client = client;
      this.up = true;
      this.reopenDelayMs = this.options.reopenMinMs;
      this.log.info("bus open");
      this.emit("link", true);
      this.pump();
    };
    client.open(onOpen);
  }

  private lost(reason: string): void {
    if (!this.up) return;
    this.up = false;
    this.client = null;
    this.port = null;
    this.log.warn({ reason }, "bus lost; reopening with backoff");
    this.emit("link", false);
    for (const job of this.queue.drain()) job.reject(new LinkDownError(`bus ${this.options.name} went down`));
    for (const unit of this.units) {
      this.failures.set(unit, 0);
      this.sessions.set(unit, this.session(unit) + 1);
      this.setUnit(unit, false, `bus ${this.options.name} is down (${reason}); reopening`);
    }
    this.scheduleReopen();
  }

  private scheduleReopen(): void {
    if (this.closed || this.reopenTimer) return;
    const delay = this.reopenDelayMs;
    this.reopenDelayMs = Math.min(this.options.reopenMaxMs, this.reopenDelayMs * 2);
    this.reopenTimer = setTimeout(() => {
      this.reopenTimer = null;
      this.open();
    }, delay);
  }

  async close(): Promise<void> {
    this.closed = true;
    // A new session starts with the next start(): nothing of this one may act on it.
    this.generation++;
    this.busy = false;
    this.failCurrent = null;
    this.quietUntil = 0;
    if (this.reopenTimer) clearTimeout(this.reopenTimer);
    this.reopenTimer = null;
    const client = this.client;
    const opening = this.opening; // this session's: a start() meanwhile begins another
    this.up = false;
    this.client = null;
    for (const job of this.queue.drain()) job.reject(new LinkDownError("bus closed"));
    // Unknown until the bus is open again: the first answer then reports each unit online,
    // and what was learnt about each device (its identity) is learnt again.
    for (const unit of this.units) {
      this.online.set(unit, false);
      this.failures.set(unit, 0);
      this.sessions.set(unit, this.session(unit) + 1);
    }
    this.answered.clear();
    this.silentWarnedAtMs.clear();
    if (client) await new Promise<void>((resolve) => client.close(() => resolve()));
    await opening;
  }
}
