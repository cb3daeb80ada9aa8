/**
 * One chaos controller, as its own process: `node --import tsx test/system/chaos/controller.ts
 * --url mqtt://... --holder H --actuator A --ttl-ms N --log FILE`.
 *
 * It uses only the client library, the way a real controller would: acquire, command under
 * the lease until it is lost (or the gateway restarts, or the controller was paused past its
 * TTL), re-acquire. Every outcome it sees goes to FILE as one JSON line, written
 * synchronously (a SIGKILL loses nothing already seen), stamped with `mono`: CLOCK_MONOTONIC
 * in ms, comparable between the processes of one machine.
 *
 * Every command of a holder sets a position of its own: positionFor(k), k counting on over the
 * holder's whole run (its lives continue from what its log file says it sent). The device's
 * applied log records only (token, device seq, position), so the checker finds each applied
 * command there by (token, position); and a controller restarted within its TTL (same token
 * again) must not set a position its previous life set, or the checker could not tell the two
 * apart, and an old outcome handed out as a new command's would not show. (A random start per
 * lease made such repeats merely unlikely: two showed in a 60-kill run.) Zombies count in a
 * range of their own.
 */
import { closeSync, existsSync, openSync, readFileSync, writeSync } from "node:fs";
import { parseArgs } from "node:util";
import { FencegateClient, FencegateError, FencegateTimeoutError, LeaseLostError, type Lease } from "fencegate-client";
import { monoMs, positionFor } from "./history.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Commands take positionFor(k) for k in [0, ZOMBIE_K); zombies k in [ZOMBIE_K, 2 × ZOMBIE_K). */
const ZOMBIE_K = 5_000;

/** Where this holder's earlier lives (the same log file) left the two counters. */
function countersFrom(file: string): { command: number; zombie: number } {
  const counters = { command: 0, zombie: 0 };
  if (!existsSync(file)) return counters;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.startsWith('{"ev":"sent"')) continue;
    let k: number;
    try {
      k = Math.round((JSON.parse(line) as { position: number }).position * 100);
    } catch {
      continue; // a line cut short by a SIGKILL: the harness reports it
    }
    if (k < ZOMBIE_K) counters.command = Math.max(counters.command, k + 1);
    else counters.zombie = Math.max(counters.zombie, k - ZOMBIE_K + 1);
  }
  return counters;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: "string" },
      holder: { type: "string" },
      actuator: { type: "string", default: "valve-1" },
      "ttl-ms": { type: "string", default: "1000" },
      "gap-ms": { type: "string", default: "10" },
      "zombie-rate": { type: "string", default: "0.5" },
      log: { type: "string" },
    },
  });
  if (!values.url || !values.holder || !values.log)
    throw new Error("usage: controller.ts --url URL --holder H --log FILE [--actuator A] [--ttl-ms N]");
  const holder = values.holder;
  const actuator = values.actuator;
  const ttlMs = Number(values["ttl-ms"]);
  const gapMs = Number(values["gap-ms"]);
  const zombieRate = Number(values["zombie-rate"]);
  const counters = countersFrom(values.log);
  const fd = openSync(values.log, "a");
  const log = (entry: Record<string, unknown>) => writeSync(fd, JSON.stringify({ ...entry, mono: monoMs(), holder }) + "\n");
  let stopping = false;
  process.once("SIGTERM", () => (stopping = true));
  // SIGUSR2: start over as if restarted, fast (a new client, no memory of the lease, which
  // stays live at the gateway): the next acquire returns the same token.
  let abandon = false;
  process.on("SIGUSR2", () => (abandon = true));
  const connect = async (): Promise<FencegateClient | null> => {
    while (!stopping) {
      try {
        return await FencegateClient.connect({ url: values.url!, holder, requestTimeoutMs: 1000 });
      } catch (err) {
        // The broker may be restarting (a chaos fault) as this controller (re)starts.
        log({ ev: "connect-retry", message: (err as Error).message });
        await sleep(200);
      }
    }
    return null;
  };
  log({ ev: "start", pid: process.pid });

  let client = await connect();

  while (!stopping && client) {
    let lease: Lease;
    const sentMono = monoMs();
    try {
      lease = await client.acquire(actuator, { ttlMs });
    } catch (err) {
      if (err instanceof FencegateError) {
        log({ ev: "acquire-refused", code: err.code });
        const wait = err.code === "LEASE_HELD" ? Math.min(err.lease?.expiresInMs ?? 100, 300) : 100;
        await sleep(Math.max(20, wait));
      } else {
        log({
          ev: "acquire-refused",
          code: err instanceof FencegateTimeoutError ? "TIMEOUT" : "ERROR",
          message: String((err as Error).message),
        });
        await sleep(100);
      }
      continue;
    }
    log({ ev: "granted", token: lease.token, sentMono });
    let reason = "";
    lease.on("lost", (why: Error) => (reason = why.message));
    let next = 0;
    for (let k = 0; !stopping && !abandon; k++) {
      const position = positionFor(counters.command++ % ZOMBIE_K);
      log({ ev: "sent", token: lease.token, seq: k, position });
      try {
        const done = await lease.command({ position }, { timeoutMs: 1000, retries: 1 });
        if (done.token !== lease.token) log({ ev: "error", message: `reply for token ${done.token} to a command under ${lease.token}` });
        next = done.seq + 1;
        log({ ev: "applied", token: done.token, seq: done.seq, position, applied: done.applied.position });
      } catch (err) {
        if (err instanceof LeaseLostError) break;
        const code = err instanceof FencegateError ? err.code : err instanceof FencegateTimeoutError ? "TIMEOUT" : "ERROR";
        log({
          ev: "refused",
          token: lease.token,
          seq: k,
          position,
          code,
          ...(code === "ERROR" ? { message: String((err as Error).message) } : {}),
        });
        if (lease.lost) break;
        // Not sent, or unknown: back off a little and go on with a new seq.
        if (code !== "STALE_SEQ") await sleep(50);
      }
      if (gapMs > 0) await sleep(gapMs);
    }
    if (abandon) {
      abandon = false;
      log({ ev: "lost", token: lease.token, reason: "restarting (SIGUSR2)" });
      await client.mqtt.endAsync(true).catch(() => undefined);
      client = await connect();
      continue;
    }
    log({ ev: "lost", token: lease.token, reason: reason || (lease.lost?.message ?? "stopping") });
    if (stopping) {
      await lease.release().catch(() => undefined);
      break;
    }
    // The zombie: a controller that decided before its pause and acts after it, with the
    // token it no longer holds (past the library's own checks). The gateway must refuse it
    // unless that lease is in fact still live there; the checker holds it to that.
    if (Math.random() < zombieRate) await zombie(client, lease.token, next + 1000, positionFor(ZOMBIE_K + (counters.zombie++ % ZOMBIE_K)));
  }
  await client?.mqtt.endAsync(true).catch(() => undefined);
  closeSync(fd);

  async function zombie(c: FencegateClient, token: number, seq: number, position: number): Promise<void> {
    log({ ev: "sent", token, seq, position });
    try {
      const reply = await c.request(actuator, "command", { holder, token, seq, set: { position } }, { timeoutMs: 1000 });
      log({ ev: "applied", token, seq, position, applied: (reply.applied as { position?: number } | undefined)?.position, zombie: true });
    } catch (err) {
      const code = err instanceof FencegateError ? err.code : err instanceof FencegateTimeoutError ? "TIMEOUT" : "ERROR";
      log({ ev: "refused", token, seq, position, code, zombie: true });
    }
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
