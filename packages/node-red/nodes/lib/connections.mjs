/**
 * The MQTT connections of one fencegate-broker config node: one FencegateClient per holder
 * id, shared by every node acting as that holder, connected on first use and closed when
 * its last user lets go. Also the register of lease keepers, by holder and actuator, where
 * a command node finds the lease it commands under.
 */
import { FencegateClient } from "fencegate-client";

/** Waits between connection attempts: from the first to the most. */
const RETRY_FIRST_MS = 500;
const RETRY_MOST_MS = 10_000;

/** Why connecting failed, short enough for a node's status (the log adds the URL). */
export function connectProblem(err) {
  const code = err?.code;
  if (code === "ECONNREFUSED") return "cannot reach the broker: connection refused";
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") return "cannot find the broker's host";
  // CONNACK refusals: 3.1.1 codes 4 and 5, MQTT 5 reasons 0x86 and 0x87 (Mosquitto answers a
  // wrong password with "not authorised").
  if ([4, 5, 0x86, 0x87].includes(code)) return "the broker refused the user name or password (or this client)";
  return `cannot connect: ${err?.message ?? String(err)}`;
}

class SharedClient {
  constructor(options, log) {
    this.options = options;
    this.log = log;
    this.users = 0;
    this.closed = false;
    /** What is wrong, as a sentence; null while connected or connecting for the first time. */
    this.problem = null;
    this.listeners = new Set();
    this.wake = null;
    /** Resolves with the client once connected, or with null if closed first; never rejects. */
    this.ready = this.connect();
  }

  async connect() {
    for (let waitMs = RETRY_FIRST_MS; !this.closed; waitMs = Math.min(waitMs * 2, RETRY_MOST_MS)) {
      try {
        const client = await FencegateClient.connect(this.options);
        if (this.closed) {
          await client.close().catch(() => {});
          return null;
        }
        client.mqtt.on("offline", () => this.report("lost the broker; reconnecting"));
        client.mqtt.on("connect", () => this.report(null));
        this.client = client;
        this.report(null);
        return client;
      } catch (err) {
        if (this.closed) return null;
        const problem = connectProblem(err);
        if (problem !== this.problem)
          this.log.warn(`fencegate: ${problem} (${this.options.url}, holder ${this.options.holder}); trying again`);
        this.report(problem);
        await new Promise((resolve) => {
          this.wake = resolve;
          setTimeout(resolve, waitMs).unref();
        });
      }
    }
    return null;
  }

  report(problem) {
    this.problem = problem;
    for (const listener of this.listeners) listener(problem);
  }

  async close() {
    this.closed = true;
    this.wake?.();
    this.listeners.clear();
    await this.client?.close().catch(() => {});
  }
}

export class Connections {
  /** `options`: FencegateClient options without the holder. */
  constructor(options, log) {
    this.options = options;
    this.log = log;
    this.clients = new Map();
    this.keepers = new Map();
  }

  /**
   * A share of the connection for `holder`: `client()` resolves once connected (null if
   * closed first), `onProblem(fn)` tells of connection trouble, now if there is some (null:
   * connected again), `release()` lets go; the last user to let go closes the connection.
   */
  use(holder) {
    let shared = this.clients.get(holder);
    if (!shared) {
      shared = new SharedClient({ ...this.options, holder }, this.log);
      this.clients.set(holder, shared);
    }
    shared.users++;
    const listeners = [];
    let released = false;
    return {
      holder,
      client: () => shared.ready,
      onProblem: (listener) => {
        listeners.push(listener);
        shared.listeners.add(listener);
        if (shared.problem !== null) listener(shared.problem);
      },
      release: async () => {
        if (released) return;
        released = true;
        for (const l of listeners) shared.listeners.delete(l);
        if (--shared.users > 0) return;
        this.clients.delete(holder);
        await shared.close();
      },
    };
  }

  /** Registers the lease keeper of `actuator` for `holder`; false if another one has it. */
  claimLease(holder, actuator, keeper) {
    const key = `${holder}\n${actuator}`;
    if (this.keepers.has(key)) return false;
    this.keepers.set(key, keeper);
    return true;
  }

  unclaimLease(holder, actuator, keeper) {
    const key = `${holder}\n${actuator}`;
    if (this.keepers.get(key) === keeper) this.keepers.delete(key);
  }

  /** The lease keeper of `actuator` for `holder`, or undefined. */
  leaseKeeper(holder, actuator) {
    return this.keepers.get(`${holder}\n${actuator}`);
  }

  async closeAll() {
    const all = [...this.clients.values()];
    this.clients.clear();
    this.keepers.clear();
    await Promise.all(all.map((c) => c.close()));
  }
}
