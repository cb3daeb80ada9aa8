/**
 * A lease as a controller holds it: renews itself well before expiry, knows at once when
 * it is lost, and numbers commands so that a retry is answered, never re-applied.
 */
import { EventEmitter } from "node:events";
import { randomUUID } from "node:crypto";
import { sign, stateTopic, type Reply } from "../../protocol/src/index.ts";
import { FencegateError, FencegateTimeoutError, LeaseLostError } from "./errors.ts";
import type { ActuatorState } from "./messages.ts";
import type { LeaseTransport } from "./transport.ts";

/**
 * The TTL of an acquire that names none: the gateway's own default (`leases.defaultTtlMs`),
 * so a lease is as long as the operator's configuration suggests unless asked otherwise.
 */
export const DEFAULT_TTL_MS = 10_000;

export interface LeaseOptions {
  /** How long the lease lasts without a renewal (default {@link DEFAULT_TTL_MS}); within the gateway's leases.minTtlMs..maxTtlMs. */
  readonly ttlMs?: number;
  /** Renew this often (default ttlMs / 3: two renewals may fail before the lease is at risk). */
  readonly renewEveryMs?: number;
  /**
   * Declare the lease lost the moment its expiry by this client's clock passes without a
   * renewal (the last renewal sent + ttlMs, never later than the gateway's). Without it the
   * lease is found lost only when the next renewal is due, which may wait for a request to
   * time out: a controller that shows "held" must not show it longer than it can be true.
   */
  readonly expireLocally?: boolean;
}

export interface CommandOptions {
  /** How long the gateway may hold the command before DEADLINE_EXCEEDED (gateway default if omitted). */
  readonly deadlineMs?: number;
  /** Per attempt; default the client's requestTimeoutMs. */
  readonly timeoutMs?: number;
  /** Retries after a lost reply, with the same (token, seq) so the gateway answers, never re-acts. Default 2. */
  readonly retries?: number;
}

export interface Applied {
  readonly token: number;
  readonly seq: number;
  readonly applied: Readonly<Record<string, number>>;
}

/**
 * The deadline a signed command carries when the caller gives none: the MAC covers the
 * deadline the gateway applies, so a signed command always states it.
 */
export const SIGNED_DEFAULT_DEADLINE_MS = 5000;

/** How often one command may move above seqs an earlier Lease of its token used (see seqTaken). */
const MAX_SEQ_SKIPS = 3;

/** What a DUPLICATE command carries as `original`: the first delivery's applied reply or refusal. */
type Original = Exclude<Reply, { readonly lease: unknown }>;

export declare interface Lease {
  /** Emitted once, the moment the lease is known to be lost. */
  on(event: "lost", listener: (reason: Error) => void): this;
  on(event: "renewed", listener: () => void): this;
}

export class Lease extends EventEmitter {
  private nextSeq = 0;
  /** Authenticated leases: the counter of the last signed renew or release; each one carries the next. */
  private lastCounter = 0;
  private lostReason: Error | null = null;
  private released = false;
  private renewTimer: NodeJS.Timeout | null = null;
  private expiryTimer: NodeJS.Timeout | null = null;
  /** Our own conservative view of expiry: when the last successful renewal was *sent* + ttl. */
  private deadlineMs: number;
  private unwatch: (() => Promise<void>) | null = null;

  /** @internal use FencegateClient.acquire */
  constructor(
    readonly client: LeaseTransport,
    readonly actuator: string,
    readonly token: number,
    readonly ttlMs: number,
    private readonly options: LeaseOptions,
    /** Authenticated actuators: the key for every request's mac. Never logged or emitted. */
    private readonly secret?: string,
    sentAtMs = performance.now(),
  ) {
    super();
    this.deadlineMs = sentAtMs + ttlMs;
  }

  /** @internal Numbers the next command above `seq` (already used under this token). */
  skipSeqsThrough(seq: number): void {
    this.nextSeq = Math.max(this.nextSeq, seq + 1);
  }

  get holder(): string {
    return this.client.holder;
  }

  /**
   * When the lease ends by this process's clock (performance.now()'s timebase) unless renewed:
   * counted from the request's send, so never after it ends at the gateway.
   */
  get expiresAtMs(): number {
    return this.deadlineMs;
  }

  /** null while the lease is usable; otherwise why it is not. */
  get lost(): Error | null {
    return this.lostReason;
  }

  /** @internal */
  async start(): Promise<void> {
    // A newer token on the retained state means someone else holds the actuator now.
    this.unwatch = await this.client.subscribe(stateTopic(this.client.base, this.actuator), (_t, body) => {
      const state = body as ActuatorState;
      if (state.fence && state.fence.token > this.token)
        this.markLost(
          new LeaseLostError(
            `A newer token (${state.fence.token}) took ${this.actuator}; lease ${this.token} is fenced.`,
            undefined,
            "STALE_TOKEN",
          ),
        );
    });
    this.scheduleRenew(this.options.renewEveryMs ?? Math.floor(this.ttlMs / 3));
    this.armExpiry();
  }

  private expired(): LeaseLostError {
    return new LeaseLostError(`The lease on ${this.actuator} expired before a renewal got through.`, undefined, "LEASE_EXPIRED");
  }

  private armExpiry(): void {
    if (!this.options.expireLocally || this.lostReason || this.released) return;
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = setTimeout(() => this.markLost(this.expired()), Math.max(0, this.deadlineMs - performance.now()));
    this.expiryTimer.unref?.();
  }

  private scheduleRenew(inMs: number): void {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => void this.renewNow(), inMs);
    this.renewTimer.unref?.();
  }

  private async renewNow(): Promise<void> {
    if (this.lostReason || this.released) return;
    if (performance.now() >= this.deadlineMs) {
      this.markLost(this.expired());
      return;
    }
    try {
      await this.renew();
      this.scheduleRenew(this.options.renewEveryMs ?? Math.floor(this.ttlMs / 3));
    } catch (err) {
      if (this.lostReason) return;
      // No answer: try again soon, while the lease is still ours by our own reckoning.
      this.scheduleRenew(Math.max(10, Math.floor(this.ttlMs / 10)));
      void err;
    }
  }

  /** Renews now. Rejects with FencegateError (and the lease is lost) if the gateway refuses. */
  async renew(): Promise<void> {
    this.assertUsable();
    const sentAtMs = performance.now();
    try {
      await this.client.request(this.actuator, "lease/renew", this.signedLeaseRequest("lease/renew"));
    } catch (err) {
      if (err instanceof FencegateError) this.markLost(err);
      throw err;
    }
    if (this.lostReason) return; // expired by our clock while the reply was on its way
    this.deadlineMs = sentAtMs + this.ttlMs;
    this.armExpiry();
    this.emit("renewed");
  }

  /**
   * Sends one command with the next seq and resolves when the device applied it. Rejects
   * with FencegateError (the contract code, fence and holder), FencegateTimeoutError (no
   * reply after the retries: the outcome is unknown) or LeaseLostError.
   */
  async command(set: Readonly<Record<string, number>>, options: CommandOptions = {}): Promise<Applied> {
    this.assertUsable();
    const deadlineMs = options.deadlineMs ?? (this.secret !== undefined ? SIGNED_DEFAULT_DEADLINE_MS : undefined);
    const retries = options.retries ?? 2;
    for (let skips = 0; ; skips++) {
      const seq = this.nextSeq++;
      const id = randomUUID();
      const body = this.signed("command", {
        holder: this.holder,
        token: this.token,
        seq,
        set,
        ...(deadlineMs !== undefined ? { deadlineMs } : {}),
      });
      const connectionsAtSend = this.client.connections;
      for (let attempt = 0; ; attempt++) {
        try {
          const reply = await this.client.request(this.actuator, "command", body, {
            id,
            ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
          });
          return { token: reply.token as number, seq: reply.seq as number, applied: reply.applied as Record<string, number> };
        } catch (err) {
          if (err instanceof FencegateTimeoutError && attempt < retries) continue; // same id, same (token, seq)
          if (!(err instanceof FencegateError)) throw err;
          if (attempt === 0 && skips < MAX_SEQ_SKIPS && this.seqTaken(err, connectionsAtSend)) {
            this.nextSeq = Math.max(this.nextSeq, (err.fence?.token === this.token ? (err.fence.seq ?? -1) : -1) + 1);
            break; // the same command again, above the seqs already used
          }
          // A retry of a command that was applied: the original outcome is the answer.
          const original = err.code === "DUPLICATE" ? (err.original as Original | undefined) : undefined;
          if (original?.ok) return { token: original.token, seq: original.seq, applied: original.applied };
          throw await this.refused(original ? new FencegateError(original.error) : err);
        }
      }
    }
  }

  /**
   * Whether the gateway says, to a first attempt, that this (token, seq) was used before this
   * Lease numbered it: by an earlier Lease of the same token, since acquiring while the
   * holder's lease is live returns its token again (a controller restarted within its TTL).
   * Nothing of this command was applied. DUPLICATE counts only without a reconnect since
   * sending: after one, the broker may have delivered this very request twice, and then the
   * original outcome is ours.
   */
  private seqTaken(err: FencegateError, connectionsAtSend: number): boolean {
    if (err.code === "STALE_SEQ") return true;
    return err.code === "DUPLICATE" && this.client.connections === connectionsAtSend;
  }

  private async refused(err: FencegateError): Promise<FencegateError> {
    if (err.endsLease) this.markLost(err);
    // The device may or may not have acted: hand the caller a fresh read to decide from.
    if (err.code === "OUTCOME_UNKNOWN") err.state = await this.client.read(this.actuator).catch(() => undefined);
    return err;
  }

  /** Gives the lease back; the next acquire by anyone gets a higher token. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    this.stop();
    if (this.lostReason) return;
    await this.client.request(this.actuator, "lease/release", this.signedLeaseRequest("lease/release"));
  }

  /**
   * Stops renewing without telling the gateway: the lease runs out at its TTL unless this
   * holder acquires it again, and then (acquire by the live holder) gets the same token. For
   * a controller that restarts, not one that is done: that one releases.
   */
  abandon(): void {
    if (this.released) return;
    this.released = true;
    this.stop();
  }

  /** A renew or release body; on an authenticated lease with the next counter (against replays) and the mac. */
  private signedLeaseRequest(verb: "lease/renew" | "lease/release"): Record<string, unknown> {
    const body = { holder: this.holder, token: this.token };
    return this.secret === undefined ? body : this.signed(verb, { ...body, counter: ++this.lastCounter });
  }

  /** Adds the mac on an authenticated lease; the body unchanged otherwise. */
  private signed<
    T extends {
      holder: string;
      token: number;
      seq?: number;
      set?: Readonly<Record<string, number>>;
      deadlineMs?: number;
      counter?: number;
    },
  >(verb: "command" | "lease/renew" | "lease/release", body: T): T & { mac?: string } {
    if (this.secret === undefined) return body;
    return { ...body, mac: sign(this.secret, { verb, actuator: this.actuator, ...body }) };
  }

  private assertUsable(): void {
    if (this.lostReason)
      throw new LeaseLostError(`Lease ${this.token} on ${this.actuator} is lost: ${this.lostReason.message}`, this.lostReason);
    if (this.released) throw new LeaseLostError(`Lease ${this.token} on ${this.actuator} was released or abandoned by this controller.`);
  }

  private markLost(reason: Error): void {
    if (this.lostReason || this.released) return;
    this.lostReason = reason;
    this.stop();
    this.emit("lost", reason);
  }

  private stop(): void {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    this.renewTimer = null;
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = null;
    void this.unwatch?.();
    this.unwatch = null;
  }
}
