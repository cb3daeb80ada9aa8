/**
 * What a fencegate lease node does, without Node-RED: while wanted, acquires the lease on
 * one actuator for one holder and keeps it (the client library renews it); while someone
 * else holds it, stands by and acquires the moment the retained state shows it free; tells
 * `onChange` each time what it holds changes, the moment it changes.
 *
 * Views (`onChange`'s argument, and the lease node's output):
 *   { state: "held", token }                  the lease is ours; commands go under `token`
 *   { state: "standby", heldBy }              another holder has it (`heldBy.holder`, `.token`)
 *   { state: "lost", token, code }            it was ours and is not: `code` says why
 *   { state: "waiting", code }                cannot acquire for now (no broker, no gateway, device down)
 *   { state: "released" }                     not wanted: released, or never acquired
 * each also with `actuator`, `holder` and a `message` sentence.
 */
import { FencegateError } from "fencegate-client";

/** How often a standby asks again besides watching the state: a net, not the mechanism. */
const STANDBY_RETRY_MS = 5000;
/** Waits after a failed acquire (no gateway, device unavailable), doubling from the first to the most. */
const RETRY_FIRST_MS = 500;
const RETRY_MOST_MS = 5000;
/** How long a release may take when the node is removed; then the lease runs out at its TTL. */
const RELEASE_WAIT_MS = 3000;

/** The code to show for an error: the contract's when it has one. */
export function codeOf(err) {
  if (err instanceof FencegateError) return err.code;
  return err?.contractCode ?? err?.code ?? "INTERNAL";
}

export class LeaseKeeper {
  /**
   * @param {{ connection: ReturnType<import("./connections.mjs").Connections["use"]>, actuator: string, ttlMs: number, onChange: (view: object) => void }} options
   */
  constructor({ connection, actuator, ttlMs, onChange }) {
    this.connection = connection;
    this.actuator = actuator;
    this.ttlMs = ttlMs;
    this.onChange = onChange;
    this.wanted = false;
    this.closed = false;
    this.lease = null;
    this.attempting = false;
    this.timer = null;
    this.failures = 0;
    this.view = null;
    this.watching = new AbortController();
    void this.watchState();
  }

  /** The held Lease, or null. */
  held() {
    return this.lease !== null && this.lease.lost === null ? this.lease : null;
  }

  /** Why no command can go now, as a sentence (for a command refused locally). */
  whyNotHeld() {
    const v = this.view;
    const on = `${this.actuator} (holder ${this.connection.holder})`;
    switch (v?.state) {
      case "standby":
        return `No lease on ${on}: standing by, held by ${v.heldBy.holder} (token ${v.heldBy.token}). Nothing was sent.`;
      case "lost":
        return `The lease on ${on} was lost (${v.code}). Nothing was sent.`;
      case "waiting":
        return `No lease on ${on} yet: ${v.message} Nothing was sent.`;
      case "released":
        return `No lease on ${on}: the lease node does not hold it (send it "acquire"). Nothing was sent.`;
      default:
        return `No lease on ${on} yet: acquiring. Nothing was sent.`;
    }
  }

  /** Begins: acquiring at once when `wanted`, else not held until want(), without a change to tell. */
  start(wanted) {
    if (wanted) this.want();
    else
      this.view = { state: "released", actuator: this.actuator, holder: this.connection.holder, message: `Not holding ${this.actuator}.` };
  }

  want() {
    this.wanted = true;
    this.failures = 0;
    this.attemptIn(0);
  }

  async unwant() {
    this.wanted = false;
    this.clearTimer();
    const lease = this.lease;
    this.lease = null;
    if (lease !== null && lease.lost === null) await lease.release().catch(() => {});
    this.show({ state: "released", message: `Released ${this.actuator}.`, ...(lease ? { token: lease.token } : {}) });
  }

  /** Stops. `release`: give the lease back (the node was removed); otherwise let it run out, so a restarted node gets it back with the same token. */
  async close(release) {
    this.closed = true;
    this.clearTimer();
    this.watching.abort();
    const lease = this.lease;
    this.lease = null;
    if (lease === null) return;
    if (!release) return lease.abandon();
    let timer;
    await Promise.race([lease.release().catch(() => {}), new Promise((resolve) => (timer = setTimeout(resolve, RELEASE_WAIT_MS)))]);
    clearTimeout(timer);
  }

  clearTimer() {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  attemptIn(ms) {
    this.clearTimer();
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.attempt();
    }, ms);
  }

  async attempt() {
    if (!this.wanted || this.closed || this.lease !== null || this.attempting) return;
    this.attempting = true;
    try {
      const client = await this.connection.client();
      if (client === null || !this.wanted || this.closed) return;
      const lease = await client.acquire(this.actuator, { ttlMs: this.ttlMs, expireLocally: true });
      if (!this.wanted || this.closed) {
        await lease.release().catch(() => {});
        return;
      }
      this.lease = lease;
      this.failures = 0;
      lease.on("lost", (reason) => this.onLost(lease, reason));
      this.show({ state: "held", token: lease.token, message: `Holding ${this.actuator} under token ${lease.token}.` });
    } catch (err) {
      if (!this.wanted || this.closed) return;
      if (err instanceof FencegateError && err.code === "LEASE_HELD" && err.lease) {
        const heldBy = { holder: err.lease.holder, token: err.lease.token };
        this.show({ state: "standby", heldBy, message: `${heldBy.holder} holds ${this.actuator} (token ${heldBy.token}); standing by.` });
        this.attemptIn(STANDBY_RETRY_MS);
      } else {
        const code = codeOf(err);
        this.show({ state: "waiting", code, message: err.message.replace(/^[A-Z_]+: /, "") });
        this.attemptIn(Math.min(RETRY_FIRST_MS * 2 ** this.failures++, RETRY_MOST_MS));
      }
    } finally {
      this.attempting = false;
    }
  }

  onLost(lease, reason) {
    if (this.lease !== lease) return;
    this.lease = null;
    const code = codeOf(reason);
    this.show({ state: "lost", token: lease.token, code, message: reason.message.replace(/^[A-Z_]+: /, "") });
    // Acquire again when the state shows the actuator free; ask anyway after a while.
    if (this.wanted && !this.closed) this.attemptIn(STANDBY_RETRY_MS);
  }

  /** The retained state tells a standby the moment the lease is free. */
  async watchState() {
    const client = await this.connection.client();
    if (client === null || this.closed) return;
    try {
      for await (const item of client.watch(this.actuator, { signal: this.watching.signal })) {
        if (item.kind === "state" && item.state.online && item.state.lease === null && this.wanted && this.lease === null)
          this.attemptIn(0);
      }
    } catch {
      // The connection closed under the watch: the node is going away.
    }
  }

  /** Tells `onChange` when what is held changed, not for every attempt that changed nothing. */
  show(fields) {
    const view = { state: fields.state, actuator: this.actuator, holder: this.connection.holder, ...fields };
    const before = this.view;
    this.view = view;
    const same =
      before !== null &&
      before.state === view.state &&
      before.token === view.token &&
      before.code === view.code &&
      before.heldBy?.holder === view.heldBy?.holder &&
      before.heldBy?.token === view.heldBy?.token;
    if (!same) this.onChange(view);
  }
}
