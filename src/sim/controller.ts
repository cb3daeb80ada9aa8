/**
 * A simulated controller that behaves like fencegate-client's Lease: acquire, renew every ttl/3
 * (retry at ttl/10 after a lost answer, give up once its own reckoning of expiry passes),
 * commands numbered 0, 1, 2, ... under the token, each retried with the same id and
 * (token, seq) after a lost reply, DUPLICATE with an applied original taken as applied, a
 * lease-ending refusal ending the lease. Under a lease that came with a secret (an authenticated
 * actuator) it signs its commands, renewals and releases as the client does, each renewal or
 * release with a counter one above the last. It can pause (a GC pause, a stopped VM): nothing it
 * would have done runs until it resumes, and then it carries on with the token it held.
 */
import { LEASE_ENDING_CODES } from "fencegate-client";
import { sign, type GatewayRequest } from "../../packages/protocol/src/index.ts";
import type { OutboundReply } from "../shell/ports.ts";
import { NetLink } from "./network.ts";
import type { Prng } from "./prng.ts";
import type { World } from "./world.ts";

export interface ControllerEnv {
  readonly world: World;
  readonly actuators: readonly string[];
  readonly minTtlMs: number;
  readonly maxTtlMs: number;
  /** The deadline the gateway applies to a command that gives none: what a signed command's MAC covers. */
  readonly defaultDeadlineMs: number;
  send(from: Controller, id: string, actuator: string, request: GatewayRequest): void;
  /** True once the quiet tail began: sessions then take the actuators in turn. */
  inTail(): boolean;
  onGranted(actuator: string, holder: string, token: number): void;
  onApplied(actuator: string, holder: string, token: number, sentAtMs: number): void;
}

interface Session {
  readonly actuator: string;
  readonly token: number;
  readonly ttlMs: number;
  /** The lease's secret, on an authenticated actuator. */
  readonly secret: string | undefined;
  /** The last counter a signed renew or release of this lease carried. */
  counter: number;
  /** Own reckoning: when the last successful renewal was sent, plus ttl. */
  expiresAtMs: number;
  nextSeq: number;
  commandsLeft: number;
  /** Commands it keeps outstanding at once (the client allows concurrent commands). */
  readonly window: number;
  over: boolean;
}

type Pending = { cancel: () => void; done: (reply: OutboundReply | null) => void };

const RETRIES = 2;

export class Controller {
  readonly link = new NetLink();
  pausedUntilMs = 0;
  /** Stopped for good, as a crashed controller: nothing it would do runs, no lease is released. */
  private halted = false;
  private session: Session | null = null;
  private sessions = 0;
  private nextId = 0;
  private readonly pending = new Map<string, Pending>();

  constructor(
    readonly holder: string,
    readonly index: number,
    private readonly env: ControllerEnv,
    private readonly rng: Prng,
  ) {}

  start(): void {
    this.later(this.rng.int(0, 50), () => this.startSession());
  }

  /** Freezes the controller: timers and arriving replies wait until it resumes. */
  pause(forMs: number): void {
    this.pausedUntilMs = Math.max(this.pausedUntilMs, this.env.world.nowMs + forMs);
  }

  /** Stops the controller for good, without releasing anything: its leases run out. */
  halt(): void {
    this.halted = true;
  }

  /** A reply from the network; handled once the controller runs. */
  receive(id: string, reply: OutboundReply): void {
    this.run(() => {
      const p = this.pending.get(id);
      if (!p) return; // late or duplicated: its request was answered or given up on
      this.pending.delete(id);
      p.cancel();
      p.done(reply);
    });
  }

  private run(fn: () => void): void {
    const { world } = this.env;
    if (this.halted) return;
    if (world.nowMs < this.pausedUntilMs) world.at(this.pausedUntilMs, () => this.run(fn));
    else fn();
  }

  private later(delayMs: number, fn: () => void): void {
    this.env.world.after(delayMs, () => this.run(fn));
  }

  private request(
    actuator: string,
    id: string,
    request: GatewayRequest,
    timeoutMs: number,
    done: (reply: OutboundReply | null) => void,
  ): void {
    const cancel = this.env.world.after(timeoutMs, () =>
      this.run(() => {
        if (this.pending.get(id)?.done !== done) return;
        this.pending.delete(id);
        done(null);
      }),
    );
    this.pending.set(id, { cancel, done });
    this.env.send(this, id, actuator, request);
  }

  private newId(): string {
    return `${this.holder}-${this.nextId++}`;
  }

  private timeoutMs(): number {
    return this.rng.int(40, 200);
  }

  // -------------------------------------------------------------------------------------

  private startSession(): void {
    const { actuators, minTtlMs, maxTtlMs } = this.env;
    const actuator = this.env.inTail() ? actuators[(this.index + this.sessions) % actuators.length]! : this.rng.pick(actuators);
    this.sessions++;
    const ttlMs = this.rng.int(minTtlMs, maxTtlMs);
    const sentAtMs = this.env.world.nowMs;
    this.request(actuator, this.newId(), { verb: "lease/acquire", holder: this.holder, ttlMs }, this.timeoutMs(), (reply) => {
      if (reply === null || !reply.ok || !("lease" in reply) || reply.lease === null) {
        this.later(this.rng.int(20, 300), () => this.startSession());
        return;
      }
      const { token } = reply.lease;
      const session: Session = {
        actuator,
        token,
        ttlMs: reply.lease.ttlMs,
        secret: reply.lease.secret,
        counter: 0,
        expiresAtMs: sentAtMs + reply.lease.ttlMs,
        nextSeq: 0,
        commandsLeft: this.rng.int(1, 6),
        window: this.rng.int(1, 3),
        over: false,
      };
      this.session = session;
      this.env.onGranted(actuator, this.holder, token);
      this.later(Math.floor(session.ttlMs / 3), () => this.renew(session));
      for (let i = 0; i < session.window; i++) this.later(this.rng.int(0, 60), () => this.command(session));
    });
  }

  private end(session: Session): void {
    if (session.over) return;
    session.over = true;
    if (this.session === session) this.session = null;
    this.later(this.rng.int(10, 200), () => this.startSession());
  }

  private renew(session: Session): void {
    if (session.over) return;
    const { world } = this.env;
    if (world.nowMs >= session.expiresAtMs) return this.end(session);
    const sentAtMs = world.nowMs;
    this.request(session.actuator, this.newId(), this.signedLeaseRequest(session, "lease/renew"), this.timeoutMs(), (reply) => {
      if (session.over) return;
      if (reply === null) return this.later(Math.max(10, Math.floor(session.ttlMs / 10)), () => this.renew(session));
      if (!reply.ok) return this.end(session);
      session.expiresAtMs = sentAtMs + session.ttlMs;
      this.later(Math.floor(session.ttlMs / 3), () => this.renew(session));
    });
  }

  private command(session: Session): void {
    if (session.over) return;
    const seq = session.nextSeq++;
    const id = this.newId();
    const unsigned = {
      verb: "command" as const,
      holder: this.holder,
      token: session.token,
      seq,
      set: { position: this.rng.int(0, 100) },
      ...(this.rng.chance(0.5) ? { deadlineMs: this.rng.int(20, 400) } : {}),
    };
    const { secret } = session;
    const deadlineMs = unsigned.deadlineMs ?? this.env.defaultDeadlineMs;
    const request: GatewayRequest =
      secret === undefined ? unsigned : { ...unsigned, mac: sign(secret, { ...unsigned, actuator: session.actuator, deadlineMs }) };
    const sentAtMs = this.env.world.nowMs;
    const attempt = (n: number) =>
      this.request(session.actuator, id, request, this.timeoutMs(), (reply) => {
        if (reply === null) {
          if (n < RETRIES) return attempt(n + 1); // same id, same (token, seq)
          return this.next(session);
        }
        this.outcome(session, sentAtMs, reply);
      });
    attempt(0);
  }

  private outcome(session: Session, sentAtMs: number, reply: OutboundReply): void {
    if (reply.ok) {
      if ("outcome" in reply) this.env.onApplied(session.actuator, this.holder, session.token, sentAtMs);
      return this.next(session);
    }
    const { error } = reply;
    const original = error.code === "DUPLICATE" ? error.original : undefined;
    if (original?.ok === true && "outcome" in original) {
      this.env.onApplied(session.actuator, this.holder, session.token, sentAtMs);
      return this.next(session);
    }
    const code = original !== undefined && !original.ok ? original.error.code : error.code;
    if (LEASE_ENDING_CODES.has(code)) return this.end(session);
    if (code === "OUTCOME_UNKNOWN") {
      // As the client does: a fresh read to decide from. Nobody waits for its answer here.
      this.request(session.actuator, this.newId(), { verb: "read", holder: this.holder }, this.timeoutMs(), () => {});
    }
    this.next(session);
  }

  private next(session: Session): void {
    if (session.over) return;
    if (--session.commandsLeft > 0) {
      this.later(this.rng.int(0, 80), () => this.command(session));
      return;
    }
    // Done: released at once, even with other commands of the window still outstanding.
    this.request(session.actuator, this.newId(), this.signedLeaseRequest(session, "lease/release"), this.timeoutMs(), () => {});
    this.end(session);
  }

  /** A renew or release; under an authenticated lease signed, with the next counter. */
  private signedLeaseRequest(session: Session, verb: "lease/renew" | "lease/release"): GatewayRequest {
    const request = { verb, holder: this.holder, token: session.token };
    if (session.secret === undefined) return request;
    const counter = ++session.counter;
    return { ...request, counter, mac: sign(session.secret, { ...request, actuator: session.actuator, counter }) };
  }
}
