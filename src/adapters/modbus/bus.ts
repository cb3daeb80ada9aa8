/**
 * One Modbus bus (an RS-485 line behind a serial adapter, or a Modbus TCP connection):
 * exclusive ownership, one transaction at a time, fair round-robin between the units on
 * it, a per-transaction timeout, and reopening with backoff when the link goes away.
 * It never throws the daemon out because a device or adapter disappeared.
 */
import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import ModbusSerial from "modbus-serial";
import { RtuPort, type RtuLineOptions } from "./rtu-port.ts";

const ModbusRTU = ModbusSerial.default;
export type ModbusClient = InstanceType<typeof ModbusRTU>;

export type BusLink = { readonly kind: "rtu"; readonly line: RtuLineOptions } | { readonly kind: "tcp"; readonly host: string; readonly port: number };

export interface BusOptions {
  readonly name: string;
  readonly link: BusLink;
  readonly timeoutMs: number;
  readonly reopenMinMs: number;
  readonly reopenMaxMs: number;
  /** After a timeout the line must be this quiet before the next request (late replies). */
  readonly quietAfterTimeoutMs: number;
  /** Consecutive timeouts after which a unit is reported offline. */
  readonly offlineAfterTimeouts: number;
  /** Bound on transactions waiting per unit. */
  readonly queueLimitPerUnit: number;
}

/** The link is down: the request was never sent. */
export class LinkDownError extends Error {
  override readonly name = "LinkDownError";
}
/** Too many transactions already wait for this unit. */
export class BusBusyError extends Error {
  override readonly name = "BusBusyError";
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
  on(event: "unit", listener: (unit: number, online: boolean) => void): this;
  on(event: "link", listener: (up: boolean) => void): this;
  on(event: "transaction", listener: (unit: number, seconds: number, result: "ok" | "exception" | "timeout" | "error") => void): this;
}

export class ModbusBus extends EventEmitter {
  private client: ModbusClient | null = null;
  private rtuPort: RtuPort | null = null;
  private readonly queues = new Map<number, Job[]>();
  private readonly units: number[] = [];
  private rotation = 0;
  private busy = false;
  private up = false;
  private closed = false;
  private reopenDelayMs: number;
  private reopenTimer: NodeJS.Timeout | null = null;
  private readonly timeouts = new Map<number, number>();
  private readonly online = new Map<number, boolean>();
  private quietUntil = 0;

  constructor(
    readonly options: BusOptions,
    private readonly log: Logger,
  ) {
    super();
    this.reopenDelayMs = options.reopenMinMs;
  }

  addUnit(unit: number): void {
    if (!this.queues.has(unit)) {
      this.queues.set(unit, []);
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

  start(): void {
    this.open();
  }

  /** Runs one transaction for `unit` when the bus is free and it is that unit's turn. */
  transact<T>(unit: number, run: (client: ModbusClient) => Promise<T>): Promise<T> {
    if (!this.up || this.closed) return Promise.reject(new LinkDownError(`bus ${this.options.name} is down`));
    const queue = this.queues.get(unit);
    if (!queue) return Promise.reject(new Error(`unit ${unit} is not on bus ${this.options.name}`));
    if (queue.length >= this.options.queueLimitPerUnit) return Promise.reject(new BusBusyError(`unit ${unit} has ${queue.length} transactions waiting`));
    return new Promise<T>((resolve, reject) => {
      queue.push({ run, resolve: resolve as (v: unknown) => void, reject });
      this.pump();
    });
  }

  private nextJob(): Job | undefined {
    for (let i = 0; i < this.units.length; i++) {
      const unit = this.units[(this.rotation + i) % this.units.length]!;
      const job = this.queues.get(unit)!.shift();
      if (job) {
        this.rotation = (this.rotation + i + 1) % this.units.length;
        return Object.assign(job, { unit });
      }
    }
    return undefined;
  }

  private pump(): void {
    if (this.busy || !this.up) return;
    const wait = this.quietUntil - performance.now();
    if (wait > 0) {
      this.busy = true;
      setTimeout(() => {
        this.busy = false;
        this.afterQuiet();
      }, Math.ceil(wait));
      return;
    }
    const job = this.nextJob() as (Job & { unit: number }) | undefined;
    if (!job || !this.client) return;
    this.busy = true;
    const startedMs = performance.now();
    const done = (result: "ok" | "exception" | "timeout" | "error") => {
      this.emit("transaction", job.unit, (performance.now() - startedMs) / 1000, result);
    };
    job
      .run(this.client)
      .then(
        (value) => {
          done("ok");
          this.noteAnswer(job.unit, true);
          job.resolve(value);
        },
        (err: unknown) => {
          if (isTimeout(err)) {
            done("timeout");
            this.noteTimeout(job.unit);
          } else {
            // A Modbus exception is still an answer: the unit is there.
            const exception = modbusExceptionCode(err) !== undefined;
            done(exception ? "exception" : "error");
            this.noteAnswer(job.unit, exception);
          }
          job.reject(err);
        },
      )
      .finally(() => {
        this.busy = false;
        this.pump();
      });
  }

  /** After a timeout: wait until the line has been quiet long enough, then drop what came. */
  private afterQuiet(): void {
    const port = this.rtuPort;
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

  private noteTimeout(unit: number): void {
    this.quietUntil = performance.now() + this.options.quietAfterTimeoutMs;
    const n = (this.timeouts.get(unit) ?? 0) + 1;
    this.timeouts.set(unit, n);
    if (n >= this.options.offlineAfterTimeouts) this.setUnit(unit, false);
  }

  private noteAnswer(unit: number, answered: boolean): void {
    if (!answered) return;
    this.timeouts.set(unit, 0);
    this.setUnit(unit, true);
  }

  private setUnit(unit: number, online: boolean): void {
    if (this.online.get(unit) === online) return;
    this.online.set(unit, online);
    this.log.info({ unit, online }, online ? "unit answering" : "unit not answering");
    this.emit("unit", unit, online);
  }

  private open(): void {
    if (this.closed) return;
    const client = this.options.link.kind === "rtu" ? new ModbusRTU((this.rtuPort = new RtuPort(this.options.link.line)) as never) : new ModbusRTU();
    const onOpen = (err: unknown) => {
      if (this.closed) {
        client.close(() => {});
        return;
      }
      if (err) {
        this.log.warn({ err: String(err), retryInMs: this.reopenDelayMs }, "cannot open the bus; retrying");
        this.scheduleReopen();
        return;
      }
      client.setTimeout(this.options.timeoutMs);
      client.on("close", () => this.lost("closed"));
      client.on("error", (e: unknown) => this.lost(String(e)));
      this.client = client;
      this.up = true;
      this.reopenDelayMs = this.options.reopenMinMs;
      this.log.info("bus open");
      this.emit("link", true);
      this.pump();
    };
    if (this.options.link.kind === "rtu") {
      client.open(onOpen);
    } else {
      client.connectTCP(this.options.link.host, { port: this.options.link.port }).then(() => onOpen(null), onOpen);
    }
  }

  private lost(reason: string): void {
    if (!this.up) return;
    this.up = false;
    this.client = null;
    this.rtuPort = null;
    this.log.warn({ reason }, "bus lost; reopening with backoff");
    this.emit("link", false);
    for (const unit of this.units) {
      for (const job of this.queues.get(unit)!.splice(0)) job.reject(new LinkDownError(`bus ${this.options.name} went down`));
      this.timeouts.set(unit, 0);
      this.setUnit(unit, false);
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
    if (this.reopenTimer) clearTimeout(this.reopenTimer);
    const client = this.client;
    this.up = false;
    this.client = null;
    for (const queue of this.queues.values()) for (const job of queue.splice(0)) job.reject(new LinkDownError("bus closed"));
    if (client) await new Promise<void>((resolve) => client.close(() => resolve()));
  }
}
