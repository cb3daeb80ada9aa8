/**
 * Connection limits of the HTTP port (docs/deploy.md, "Health and metrics"). Node's own `maxConnections` drops
 * every new connection once the count is reached, and an idle connection was only closed
 * by the headers timeout, checked every 30 s: 80 idle TCP connections kept /healthz, the
 * page and /metrics unreachable for 30 to 40 s at a time, credentials or not.
 *
 * Here a connection that has no request in progress (none yet, headers still arriving, or
 * idle between keep-alive requests) is idle, and idle connections are what gives way: a new
 * connection over the total limit, or over its address's limit, closes the oldest idle one
 * (of that address, for the latter). A client that sends its request at once, as Prometheus,
 * a browser and curl do, is always served; what takes room for good is only requests in
 * progress (event streams, bounded by count in status-routes.ts). A connection that sends
 * nothing is closed by the headers timeout, which counts from the connection (serveHttp
 * checks it every second, not every 30 s).
 */
import type { Server } from "node:http";
import type { Socket } from "node:net";

export interface ConnectionLimits {
  /** Connections at once; beyond, the oldest idle one is closed (or, with none idle, the new one). */
  readonly maxConnections: number;
  /** Connections at once from one remote address, the same way. */
  readonly maxPerAddress: number;
}

export function limitConnections(server: Server, limits: ConnectionLimits): void {
  /** Connections without a request in progress, oldest first (a Set keeps insertion order). */
  const idle = new Set<Socket>();
  const open = new Set<Socket>();
  const perAddress = new Map<string, Set<Socket>>();

  const oldestIdle = (among: Iterable<Socket>): Socket | undefined => {
    for (const s of idle) if (among === open || (among as Set<Socket>).has(s)) return s;
    return undefined;
  };

  server.on("connection", (socket: Socket) => {
    const address = socket.remoteAddress ?? "";
    let mine = perAddress.get(address);
    if (mine === undefined) {
      mine = new Set();
      perAddress.set(address, mine);
    }
    for (const [among, limit] of [
      [mine, limits.maxPerAddress],
      [open, limits.maxConnections],
    ] as const) {
      if (among.size < limit) continue;
      const victim = oldestIdle(among);
      if (victim === undefined) {
        socket.destroy();
        if (mine.size === 0) perAddress.delete(address);
        return;
      }
      forget(victim);
      victim.destroy();
    }
    open.add(socket);
    mine.add(socket);
    idle.add(socket);
    socket.once("close", () => forget(socket));
  });

  function forget(socket: Socket): void {
    idle.delete(socket);
    if (!open.delete(socket)) return;
    const address = socket.remoteAddress ?? "";
    const mine = perAddress.get(address);
    mine?.delete(socket);
    if (mine?.size === 0) perAddress.delete(address);
  }

  server.on("request", (req, res) => {
    const socket = req.socket;
    idle.delete(socket);
    res.once("finish", () => {
      // Idle again, and the newest: keep-alive connections in use are the last to go.
      if (open.has(socket) && !socket.destroyed) idle.add(socket);
    });
  });
}
