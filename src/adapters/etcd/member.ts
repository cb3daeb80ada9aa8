/**
 * This gateway as a member of a gateway group on etcd: runs the leadership machine
 * (src/core/leadership.ts) with real time and real etcd requests, and keeps the group's
 * token counters.
 *
 * Keys, under `/fencegate/<group>/`:
 *   leader           {"gateway": id, "nonce": per-process random} attached to the active
 *                    gateway's etcd lease; created only if absent.
 *   token/<actuator> the highest token granted for the actuator in the whole group, as 16
 *                    zero-padded decimal digits (so etcd's byte-wise LESS compares numbers).
 *
 * A token is committed with one transaction that checks leadership (the leader key is still
 * this process's, created at this term's revision) and that etcd's counter is below the new
 * token, then writes it. "Below", not "one less": a grant whose commit timed out may or may
 * not have been applied; the next one must not depend on knowing which. The core computes
 * each token as one more than the highest it knows, and at takeover it knows etcd's value,
 * so in the normal case the counter goes up by exactly one per grant.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import {
  INITIAL_LEADERSHIP,
  etcdOutOfReach,
  leadershipStep,
  leadershipWakeMs,
  mayDriveDevices,
  mayGrant,
  type LeadershipConfig,
  type LeadershipEffect,
  type LeadershipEvent,
  type LeadershipState,
  type StepDownReason,
  type Term,
} from "../../core/leadership.ts";
import type { Clock, GrantCommit, GroupPort, Scheduler } from "../../shell/ports.ts";
import { configDifferences, parsePublished, type PublishedConfig } from "./actuator-digest.ts";
import { EtcdError, type EtcdClient, type KeyValue } from "./client.ts";

/** The requests a member makes of etcd: the client's, or the simulator's etcd. */
export type EtcdRequests = Pick<EtcdClient, "grantLease" | "keepAlive" | "revokeLease" | "get" | "list" | "put" | "txn" | "close">;

export interface GroupMemberOptions {
  readonly client: EtcdRequests;
  readonly group: string;
  readonly gatewayId: string;
  readonly config: LeadershipConfig;
  readonly clock: Clock;
  readonly scheduler: Scheduler;
  readonly log: Logger;
  /** Called when this gateway has won the leader key: raise the device fences, then serve. */
  readonly onActivate: (term: Term) => void;
  /** Called when device I/O must stop, synchronously, before anything else. */
  readonly onDeactivate: (reason: StepDownReason, detail: string) => void;
  /** This gateway's actuator configuration, published for the other members and compared with theirs (none: not compared). */
  readonly published?: PublishedConfig;
}

/** The most members' published configurations read: a group is two or three gateways. */
const MAX_MEMBERS = 16;

const TOKEN_DIGITS = 16; // 2^53-1 has 16 digits

/** The key the group's active gateway holds. */
export function leaderKeyOf(group: string): string {
  return `/fencegate/${group}/leader`;
}

/** The gateway id a leader key names, "nobody" for none (for people: logs and the doctor). */
export function leaderOf(kv: KeyValue | null): string {
  if (kv === null) return "nobody";
  try {
    return String((JSON.parse(kv.value) as { gateway?: unknown }).gateway ?? "unknown");
  } catch {
    return "something not written by fencegate";
  }
}

/** Where a member publishes its actuator configuration (src/adapters/etcd/actuator-digest.ts). */
function memberKeyOf(group: string, gatewayId: string): string {
  return `/fencegate/${group}/members/${gatewayId}`;
}

/** How this member's actuators differ from other members', for the log, /healthz and the doctor; null when they do not. */
export function differencesSentence(
  group: string,
  found: readonly { readonly gateway: string; readonly differences: readonly string[] }[],
): string | null {
  if (found.length === 0) return null;
  const others = found.map((f) => f.gateway);
  return (
    `this gateway's actuators are configured differently from ${others.join(" and ")}'s, so it does not take over: ${found.flatMap((f) => f.differences).join("; ")}. ` +
    `Give every member of group ${group} the same actuators; if ${others.join(" or ")} has left the group for good, remove what it published (etcdctl del ${memberKeyOf(group, others[0]!)}).`
  );
}

/** The other members whose published actuator configuration differs from `mine`, and how. */
export async function differingMembers(
  client: EtcdRequests,
  group: string,
  mine: PublishedConfig,
): Promise<{ gateway: string; differences: string[] }[]> {
  const differing: { gateway: string; differences: string[] }[] = [];
  for (const kv of await client.list(`/fencegate/${group}/members/`, MAX_MEMBERS)) {
    const other = parsePublished(kv.value);
    if (other === null || other.gateway === mine.gateway) continue;
    const differences = configDifferences(mine, other);
    if (differences.length > 0) differing.push({ gateway: other.gateway, differences });
  }
  return differing;
}

function tokenText(token: number): string {
  return String(token).padStart(TOKEN_DIGITS, "0");
}

function tokenValue(kv: KeyValue | null): number {
  if (kv === null) return 0;
  const n = Number(kv.value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new EtcdError("refused", `etcd key ${kv.key} holds "${kv.value.slice(0, 40)}", not a token; it was not written by fencegate`);
  return n;
}

export class EtcdGroupMember implements GroupPort {
  private state: LeadershipState = INITIAL_LEADERSHIP;
  /** Who held the leader key at the last look, to log changes only. */
  private lastLeader: string | null = null;
  /** The last etcd failure logged at warn: a retry every few hundred ms repeats it at debug only. */
  private lastFailure: string | null = null;
  private cancelWake: (() => void) | null = null;
  /** Per actuator, the last token a commit confirmed: a second commit of it is a view behind the group's, not a retry. */
  private readonly confirmedTokens = new Map<string, number>();
  private readonly prefix: string;
  /** Whether this member's configuration is in etcd yet, and how the others' differ from it (as last read, and when). */
  private published = false;
  private differing: { gateway: string; differences: string[] }[] = [];
  private membersReadAtMs = Number.NEGATIVE_INFINITY;
  /** What this process writes into the leader key: the gateway id and a per-process nonce. */
  readonly identity: string;

  constructor(private readonly options: GroupMemberOptions) {
    this.prefix = `/fencegate/${options.group}/`;
    this.identity = JSON.stringify({ gateway: options.gatewayId, nonce: randomBytes(8).toString("hex") });
  }

  get leaderKey(): string {
    return leaderKeyOf(this.options.group);
  }

  tokenKey(actuator: string): string {
    return `${this.prefix}token/${actuator}`;
  }

  get phase(): LeadershipState["phase"] {
    return this.state.phase;
  }

  get term(): Term | null {
    return this.state.term;
  }

  start(): void {
    this.dispatch({ type: "start" });
  }

  /** Steps down (if active) and gives the lease up, so a standby takes over without waiting for the TTL. */
  async stop(): Promise<void> {
    const lease = this.state.lease;
    this.dispatch({ type: "stop" });
    this.cancelWake?.();
    if (lease !== null) await this.options.client.revokeLease(lease.id).catch(() => {});
  }

  /** Releases the etcd client's sockets (after {@link stop}). */
  close(): void {
    this.options.client.close();
  }

  /** Checked before every frame to a device. */
  mayDriveDevices(): boolean {
    return mayDriveDevices(this.options.config, this.state, this.options.clock.monotonicMs());
  }

  /**
   * Why this member cannot tell whether any gateway of the group serves (for /healthz and
   * the status page), or null: it has not reached etcd for longer than a lease TTL.
   */
  etcdProblem(): string | null {
    const { config, clock } = this.options;
    const nowMs = clock.monotonicMs();
    if (!etcdOutOfReach(config, this.state, nowMs)) return null;
    const silentS = Math.round((nowMs - this.state.unreachableSinceMs!) / 1000);
    const last = this.lastFailure === null ? "" : ` (last: ${this.lastFailure})`;
    return `this gateway has not reached etcd for ${silentS} s, longer than the lease TTL (${config.ttlMs / 1000} s): it cannot serve or take over, and cannot tell whether another gateway of the group serves${last}; check etcd (etcdctl endpoint health --cluster) and this gateway's network to it`;
  }

  /** Why this member will not take over (its actuators differ from another member's), or null; not said while it is active. */
  configProblem(): string | null {
    return this.state.phase === "active" ? null : differencesSentence(this.options.group, this.differing);
  }

  /**
   * Whether every other member's published actuator configuration matches this one's, read
   * again when about to campaign (`now`), else at most once a renewal period. Publishes this
   * member's own first.
   */
  private async membersAgree(now: boolean): Promise<boolean> {
    const { published, client, config, clock, group, log } = this.options;
    if (published === undefined) return true;
    if (!now && clock.monotonicMs() - this.membersReadAtMs < config.renewEveryMs) return this.differing.length === 0;
    if (!this.published) {
      await client.put(memberKeyOf(group, published.gateway), JSON.stringify(published));
      this.published = true;
    }
    const differing = await differingMembers(client, group, published);
    this.membersReadAtMs = clock.monotonicMs();
    const before = differencesSentence(group, this.differing);
    const after = differencesSentence(group, differing);
    this.differing = differing;
    if (after !== null && after !== before) log.error({ code: "GROUP_CONFIG_DIFFERS", members: differing.map((d) => d.gateway) }, after);
    if (after === null && before !== null)
      log.info("this gateway's actuators are configured as every other member's again; it may take over");
    return differing.length === 0;
  }

  /** A device or etcd showed that another gateway leads now. */
  stale(reason: string): void {
    this.dispatch({ type: "stale", reason });
  }

  /** The group's highest granted token for `actuator` (0: none yet). */
  /** The group's highest granted token of each actuator it has granted on, up to `limit` of them. */
  async groupTokens(limit: number): Promise<Map<string, number>> {
    const tokenPrefix = this.tokenKey("");
    const tokens = new Map<string, number>();
    for (const kv of await this.options.client.list(tokenPrefix, limit)) tokens.set(kv.key.slice(tokenPrefix.length), tokenValue(kv));
    return tokens;
  }

  async readToken(actuator: string): Promise<number> {
    return tokenValue(await this.options.client.get(this.tokenKey(actuator)));
  }

  async commitGrant(actuator: string, token: number): Promise<GrantCommit> {
    const { config, clock } = this.options;
    const term = this.state.term;
    if (term === null || !mayGrant(config, this.state, clock.monotonicMs())) {
      return {
        ok: false,
        stale: false,
        message: term === null ? "this gateway is not the group's active gateway" : "etcd did not answer this gateway's last request",
      };
    }
    const key = this.tokenKey(actuator);
    const leaderChecks = [
      { key: this.leaderKey, target: "VALUE", result: "EQUAL", value: this.identity },
      { key: this.leaderKey, target: "CREATE", result: "EQUAL", createRevision: term.revision },
    ] as const;
    const put = [{ put: { key, value: tokenText(token) } }];
    const read = [{ range: { key: this.leaderKey } }, { range: { key } }];
    try {
      let result = await this.options.client.txn(
        [...leaderChecks, { key, target: "VALUE", result: "LESS", value: tokenText(token) }],
        put,
        read,
      );
      // etcd's value compare fails on a key that does not exist: the first token of an actuator.
      if (!result.succeeded && result.ranges[1] === null && this.isMine(result.ranges[0] ?? null, term)) {
        result = await this.options.client.txn([...leaderChecks, { key, target: "CREATE", result: "EQUAL", createRevision: 0 }], put, read);
      }
      if (result.succeeded) return this.confirmed(actuator, token);
      const leader = result.ranges[0] ?? null;
      if (!this.isMine(leader, term))
        return { ok: false, stale: true, message: "the leader key is no longer this gateway's: another gateway leads the group" };
      const current = tokenValue(result.ranges[1] ?? null);
      // The client asks the next endpoint when an answer does not come in time, and etcd may
      // have applied the first attempt: a token written during this unbroken term (the leader
      // key checked above) that no commit of this term confirmed is this commit's own.
      const writtenInTerm = (result.ranges[1]?.modRevision ?? 0) > term.revision;
      if (current === token && writtenInTerm && this.confirmedTokens.get(actuator) !== token) return this.confirmed(actuator, token);
      return {
        ok: false,
        stale: true,
        message: `etcd already holds token ${current} for ${actuator}, not below ${token}: this gateway's view is behind the group's`,
      };
    } catch (err) {
      return { ok: false, stale: false, message: err instanceof Error ? err.message : String(err) };
    }
  }

  private confirmed(actuator: string, token: number): GrantCommit {
    this.confirmedTokens.set(actuator, token);
    return { ok: true };
  }

  private isMine(kv: KeyValue | null, term: Term): boolean {
    return kv !== null && kv.value === this.identity && kv.createRevision === term.revision;
  }

  private dispatch(event: LeadershipEvent): void {
    const { state, effects } = leadershipStep(this.options.config, this.state, { ...event, nowMs: this.options.clock.monotonicMs() });
    const before = this.state;
    this.state = state;
    if (before.phase !== state.phase) this.options.log.debug({ from: before.phase, to: state.phase }, "group phase");
    for (const effect of effects) this.perform(effect);
    this.rearm();
  }

  private rearm(): void {
    this.cancelWake?.();
    this.cancelWake = null;
    const at = leadershipWakeMs(this.options.config, this.state);
    if (at !== null) this.cancelWake = this.options.scheduler.at(at, () => this.dispatch({ type: "tick" }));
  }

  private perform(effect: LeadershipEffect): void {
    const { client, log } = this.options;
    switch (effect.kind) {
      case "deactivate":
        log.warn({ reason: effect.reason, detail: effect.detail }, "stepping down: device I/O stopped");
        this.options.onDeactivate(effect.reason, effect.detail);
        return;
      case "activate":
        log.info({ term: effect.term.revision }, "this gateway holds the group's leader key; taking over");
        this.options.onActivate(effect.term);
        return;
      case "revoke":
        void client
          .revokeLease(effect.id)
          .catch((err: unknown) => log.debug({ lease: effect.id, err }, "could not revoke etcd lease; it expires by itself"));
        return;
      case "grant":
        return this.grantLease(effect.ttlMs);
      case "renew":
        return this.renewLease(effect.id);
      case "look":
        return this.lookAtLeader(effect.leaseId);
      case "campaign":
        return this.campaign(effect.leaseId);
    }
  }

  private grantLease(ttlMs: number): void {
    const { client, clock, log } = this.options;
    const sentAtMs = clock.monotonicMs();
    void client.grantLease(Math.ceil(ttlMs / 1000)).then(
      ({ id, ttlS }) => {
        this.lastFailure = null;
        log.debug({ lease: id, ttlS }, "etcd lease granted");
        this.dispatch({ type: "granted", id, ttlMs: ttlS * 1000, sentAtMs });
      },
      (err: unknown) => {
        this.failed("etcd lease grant failed; retrying", err);
        this.dispatch({ type: "grantFailed" });
      },
    );
  }

  private renewLease(id: string): void {
    const { client, clock, log } = this.options;
    const sentAtMs = clock.monotonicMs();
    void client.keepAlive(id).then(
      (ttlS) => {
        if (this.lastFailure !== null) log.info({ lease: id }, "etcd answers again");
        this.lastFailure = null;
        log.debug({ lease: id, ttlS }, "etcd lease renewed");
        this.dispatch({ type: "renewed", id, ttlMs: ttlS * 1000, sentAtMs });
      },
      (err: unknown) => {
        this.failed("etcd lease renewal failed; retrying", err, { lease: id });
        this.dispatch({ type: "renewFailed", id });
      },
    );
  }

  private lookAtLeader(leaseId: string): void {
    const { client, log } = this.options;
    void (async () => {
      const kv = await client.get(this.leaderKey);
      const leader = this.classify(kv, leaseId);
      // Before a campaign, always read the others' configurations again.
      return { kv, leader, configAgrees: await this.membersAgree(leader === "none" && this.state.phase === "standby") };
    })().then(
      ({ kv, leader, configAgrees }) => {
        this.noteLeader(kv);
        this.dispatch({ type: "looked", leaseId, leader, configAgrees });
      },
      (err: unknown) => {
        log.debug({ err }, "could not read the leader key");
        this.dispatch({ type: "lookFailed" });
      },
    );
  }

  private campaign(leaseId: string): void {
    void this.options.client
      .txn(
        [{ key: this.leaderKey, target: "CREATE", result: "EQUAL", createRevision: 0 }],
        [{ put: { key: this.leaderKey, value: this.identity, lease: leaseId } }],
        [{ range: { key: this.leaderKey } }],
      )
      .then(
        (result) => {
          if (!result.succeeded) this.noteLeader(result.ranges[0] ?? null);
          this.dispatch({ type: "campaigned", won: result.succeeded ? { revision: result.revision } : null });
        },
        (err: unknown) => {
          this.failed("campaign for the leader key failed", err);
          this.dispatch({ type: "campaignFailed" });
        },
      );
  }

  /** A failed etcd request: at warn when it says something new, else at debug (retries come every few hundred ms). */
  private failed(what: string, err: unknown, fields: Record<string, unknown> = {}): void {
    const text = `${what}: ${String(err)}`;
    const level = text === this.lastFailure ? "debug" : "warn";
    this.lastFailure = text;
    this.options.log[level]({ ...fields, err }, what);
  }

  /** Logs who holds the leader key when that changes: what an operator looking at a standby wants to know. */
  private noteLeader(kv: KeyValue | null): void {
    const holder = kv !== null && kv.value === this.identity ? "this gateway" : leaderOf(kv);
    if (holder === this.lastLeader) return;
    this.lastLeader = holder;
    if (holder === "this gateway") return; // said when it took over
    this.options.log.info(
      { leader: holder },
      holder === "nobody"
        ? this.differing.length > 0
          ? "the group's leader key is free; not taking over: this gateway's actuators are configured differently from another member's"
          : "the group's leader key is free; campaigning"
        : "the group's leader key is held by another gateway; standing by",
    );
  }

  private classify(kv: KeyValue | null, leaseId: string): "none" | "other" | { mine: Term } {
    if (kv === null) return "none";
    if (kv.value === this.identity && kv.lease === leaseId) return { mine: { revision: kv.createRevision } };
    return "other";
  }
}
