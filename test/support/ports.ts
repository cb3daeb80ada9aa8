import net from "node:net";

/**
 * A TCP port that was free a moment ago on 127.0.0.1. Whoever binds it next must expect to
 * find it taken (EADDRINUSE) and draw another: it is in Linux's ephemeral range, where any
 * listen(0) or outgoing connection on the machine may be handed it in between.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Resolves once something accepts connections on host:port. */
export async function waitForPort(port: number, timeoutMs = 5000, host = "127.0.0.1"): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect({ port, host }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`nothing listens on ${host}:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Linux's ports below its ephemeral range (32768-60999) that these picks draw from. */
const BELOW_EPHEMERAL = { first: 20_000, count: 12_000 };
/** Slices of that range, one per concurrent test worker: workers never draw the same port. */
const WORKER_SLICES = 8;
/** Ports this process was handed: a cluster asks several before binding any. */
const handedOut = new Set<number>();

/**
 * A port that was free a moment ago, below Linux's ephemeral range: for a server told its
 * port before it binds it and started again on the same port (Mosquitto, etcd). No
 * listen(0) or outgoing connection is handed a port there, this process is never handed the
 * same one twice, and concurrent vitest workers draw from separate slices (VITEST_POOL_ID),
 * so only another program's pick can take it in between; the first bind must still expect
 * EADDRINUSE.
 */
export async function portBelowEphemeral(): Promise<number> {
  const size = Math.floor(BELOW_EPHEMERAL.count / WORKER_SLICES);
  const base = BELOW_EPHEMERAL.first + (Number(process.env["VITEST_POOL_ID"] ?? 0) % WORKER_SLICES) * size;
  for (let tries = 0; tries < 10 * size; tries++) {
    const port = base + Math.floor(Math.random() * size);
    if (handedOut.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
    });
    if (!free) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port found in ${base}-${base + size - 1}: ${handedOut.size} already handed out by this process`);
}
