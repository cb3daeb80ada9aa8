/**
 * The simulated etcd of a gateway group, and each member's client of it. The members are the
 * real EtcdGroupMember (src/adapters/etcd/member.ts) over the real leadership rules
 * (src/core/leadership.ts): only the requests are simulated, so the leader key's campaign,
 * the token commits' transaction and the self-fencing window are the daemon's own.
 *
 * One store per run, on the World's clock: keys with create and mod revisions, leases that
 * expire exactly at their TTL after etcd last processed a grant or renewal (the earliest a
 * real etcd may; it checks twice a second), taking their keys with them. A member's request
 * travels with a latency per leg, may be lost on the way (not applied) or its answer lost
 * (applied); like the real client it then asks again (another endpoint: the request may be
 * applied twice) until its deadline passes, and fails. A member cut off from etcd loses
 * every request and answer meanwhile. An answer reaches the member's process only when it
 * runs (`gate`): never after it died, after a pause once it resumes.
 */
import type { EtcdRequests } from "../adapters/etcd/member.ts";
import type { Compare, KeyValue, Operation, TxnResult } from "../adapters/etcd/client.ts";
import type { Prng } from "./prng.ts";
import type { World } from "./world.ts";

export interface EtcdFaults {
  /** One leg of a request takes 1..latencyMaxMs. */
  readonly latencyMaxMs: number;
  /** An attempt that never reaches etcd. */
  readonly pLostRequest: number;
  /** An attempt etcd applied whose answer never came back. */
  readonly pLostAnswer: number;
}

interface SimLease {
  readonly ttlS: number;
  expiresAtMs: number;
}

/** etcd's store and leases, as every member sees them. */
export class SimEtcd {
  private revision = 1;
  private readonly keys = new Map<string, KeyValue>();
  private readonly leases = new Map<string, SimLease>();
  private nextLease = 1;

  constructor(
    private readonly world: World,
    /** Every key a transaction or put wrote, and which member's request wrote it. */
    private readonly onWrite: (by: string, key: string, value: string) => void = () => {},
  ) {}

  /** What a key holds now (leases past their TTL are gone by then). */
  peek(key: string): KeyValue | null {
    this.expire();
    return this.keys.get(key) ?? null;
  }

  grantLease(ttlS: number): { id: string; ttlS: number } {
    this.expire();
    const id = String(this.nextLease++);
    this.leases.set(id, { ttlS, expiresAtMs: this.world.nowMs + ttlS * 1000 });
    return { id, ttlS };
  }

  /** The TTL the lease has again, counted from now; 0 when etcd no longer knows it. */
  keepAlive(id: string): number {
    this.expire();
    const lease = this.leases.get(id);
    if (lease === undefined) return 0;
    lease.expiresAtMs = this.world.nowMs + lease.ttlS * 1000;
    return lease.ttlS;
  }

  revokeLease(id: string): void {
    this.expire();
    this.endLease(id);
  }

  list(prefix: string, limit: number): KeyValue[] {
    this.expire();
    return [...this.keys.values()]
      .filter((kv) => kv.key.startsWith(prefix))
      .sort((a, b) => (a.key < b.key ? -1 : 1))
      .slice(0, limit);
  }

  put(by: string, key: string, value: string): void {
    this.expire();
    this.revision++;
    this.write(by, key, value, "");
  }

  txn(by: string, compare: readonly Compare[], success: readonly Operation[], failure: readonly Operation[]): TxnResult {
    this.expire();
    const succeeded = compare.every((c) => this.holds(c));
    const ops = succeeded ? success : failure;
    if (ops.some((op) => !("range" in op))) this.revision++;
    const ranges: (KeyValue | null)[] = [];
    for (const op of ops) {
      if ("range" in op) ranges.push(this.keys.get(op.range.key) ?? null);
      else if ("put" in op) this.write(by, op.put.key, op.put.value, op.put.lease ?? "");
      else this.keys.delete(op.delete.key);
    }
    return { succeeded, revision: this.revision, ranges };
  }

  private holds(c: Compare): boolean {
    const kv = this.keys.get(c.key);
    switch (c.target) {
      case "CREATE":
        return (kv?.createRevision ?? 0) === c.createRevision;
      case "MOD":
        return (kv?.modRevision ?? 0) === c.modRevision;
      case "VALUE":
        // etcd compares bytes; a key that does not exist fails every value compare.
        if (kv === undefined) return false;
        return c.result === "EQUAL" ? kv.value === c.value : kv.value < c.value;
    }
  }

  private write(by: string, key: string, value: string, lease: string): void {
    if (lease !== "" && !this.leases.has(lease)) throw new Error(`etcdserver: requested lease not found`);
    const before = this.keys.get(key);
    this.keys.set(key, { key, value, lease, createRevision: before?.createRevision ?? this.revision, modRevision: this.revision });
    this.onWrite(by, key, value);
  }

  private expire(): void {
    for (const [id, lease] of this.leases) if (lease.expiresAtMs <= this.world.nowMs) this.endLease(id);
  }

  private endLease(id: string): void {
    if (!this.leases.delete(id)) return;
    const attached = [...this.keys.values()].filter((kv) => kv.lease === id);
    if (attached.length === 0) return;
    this.revision++;
    for (const kv of attached) this.keys.delete(kv.key);
  }
}

/** How a member's process takes what comes back to it (see World.schedulerFor). */
export interface ProcessGate {
  /** A timer of the process's own (the client's retry). */
  timer(fn: () => void): void;
  /** An answer from the network. */
  io(fn: () => void): void;
}

class EtcdTimeout extends Error {
  constructor() {
    super("etcd did not answer in time (request timed out)");
  }
}

/** One member's client: the requests of EtcdGroupMember, carried to the simulated etcd. */
export class SimEtcdClient implements EtcdRequests {
  /** Cut off from etcd (a partition) until then. */
  cutOffUntilMs = 0;

  constructor(
    private readonly name: string,
    private readonly etcd: SimEtcd,
    private readonly world: World,
    private readonly rng: Prng,
    private readonly faults: () => EtcdFaults,
    private readonly gate: ProcessGate,
    private readonly requestTimeoutMs: number,
    private readonly fault: (kind: string) => void,
  ) {}

  grantLease(ttlS: number): Promise<{ id: string; ttlS: number }> {
    return this.call(() => this.etcd.grantLease(ttlS));
  }

  keepAlive(id: string): Promise<number> {
    return this.call(() => this.etcd.keepAlive(id));
  }

  revokeLease(id: string): Promise<void> {
    return this.call(() => this.etcd.revokeLease(id));
  }

  get(key: string): Promise<KeyValue | null> {
    return this.call(() => this.etcd.peek(key));
  }

  list(prefix: string, limit: number): Promise<KeyValue[]> {
    return this.call(() => this.etcd.list(prefix, limit));
  }

  put(key: string, value: string): Promise<void> {
    return this.call(() => this.etcd.put(this.name, key, value));
  }

  txn(compare: readonly Compare[], success: readonly Operation[], failure: readonly Operation[]): Promise<TxnResult> {
    return this.call(() => this.etcd.txn(this.name, compare, success, failure));
  }

  close(): void {}

  private cutOff(): boolean {
    return this.world.nowMs < this.cutOffUntilMs;
  }

  /** Two endpoints, each with half the deadline, as the real client shares it out. */
  private call<T>(op: () => T): Promise<T> {
    const attemptMs = Math.floor(this.requestTimeoutMs / 2);
    return new Promise<T>((resolve, reject) => {
      const attempt = (left: number) => {
        const startMs = this.world.nowMs;
        const failed = () =>
          this.world.at(startMs + attemptMs, () => this.gate.timer(() => (left > 1 ? attempt(left - 1) : reject(new EtcdTimeout()))));
        const faults = this.faults();
        const there = this.rng.int(1, faults.latencyMaxMs);
        const back = this.rng.int(1, faults.latencyMaxMs);
        if (this.cutOff() || this.rng.chance(faults.pLostRequest)) {
          this.fault(this.cutOff() ? "etcd.cutOffDrop" : "etcd.lostRequest");
          return failed();
        }
        this.world.after(there, () => {
          if (this.cutOff()) return failed();
          let result: { ok: true; value: T } | { ok: false; err: unknown };
          try {
            result = { ok: true, value: op() };
          } catch (err) {
            result = { ok: false, err };
          }
          if (this.rng.chance(faults.pLostAnswer)) {
            this.fault("etcd.lostAnswer");
            return failed();
          }
          this.world.after(back, () => {
            if (this.cutOff()) return failed();
            this.gate.io(() => (result.ok ? resolve(result.value) : reject(result.err)));
          });
        });
      };
      attempt(2);
    });
  }
}
