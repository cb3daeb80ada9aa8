/**
 * A TCP proxy between a client and the broker, to play a broker that cuts a client off
 * for one particular packet: it forwards both ways, records what each connection sent
 * upstream, and drops a connection (both sides, the offending bytes unforwarded) the first
 * time its upstream bytes contain a given string. It can also hold everything both ways
 * and let it go later, in order: what a paused controller's link looks like from outside,
 * from a moment of the test's choosing or right after a given request went through (a reply
 * that is slow to come back).
 */
import net from "node:net";

export interface ProxiedConnection {
  /** Everything the client sent towards the broker, as latin1 (MQTT topics are plain bytes in it). */
  upstream: string;
  /** Whether the proxy cut this connection. */
  cut: boolean;
}

export interface TcpProxy {
  readonly port: number;
  readonly url: string;
  readonly connections: readonly ProxiedConnection[];
  /** Cuts the next connection whose upstream bytes come to contain `needle`; once. */
  cutOnUpstream(needle: string): void;
  /** Forwards nothing, either way, on any connection: the bytes wait in the proxy. */
  hold(): void;
  /** Holds (as {@link hold}) right after forwarding the upstream bytes that come to contain `needle`; once. */
  holdAfterUpstream(needle: string): void;
  /** Delivers what waited, in order, and forwards again. */
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const connections: ProxiedConnection[] = [];
  const sockets = new Set<net.Socket>();
  let needle: string | null = null;
  let holdNeedle: string | null = null;
  /** While held: the writes that wait, in the order they came. */
  let held: (() => void)[] | null = null;
  const forward = (write: () => void) => (held ? held.push(write) : write());
  const server = net.createServer((client) => {
    const conn: ProxiedConnection = { upstream: "", cut: false };
    connections.push(conn);
    const broker = net.connect(target);
    for (const s of [client, broker]) {
      sockets.add(s);
      s.setNoDelay(true);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {
        client.destroy();
        broker.destroy();
      });
    }
    client.on("data", (chunk: Buffer) => {
      conn.upstream += chunk.toString("latin1");
      if (needle !== null && conn.upstream.includes(needle)) {
        needle = null;
        conn.cut = true;
        client.destroy();
        broker.destroy();
        return;
      }
      forward(() => broker.write(chunk));
      if (holdNeedle !== null && conn.upstream.includes(holdNeedle)) {
        holdNeedle = null;
        held ??= [];
      }
    });
    broker.on("data", (chunk: Buffer) => forward(() => client.write(chunk)));
    client.on("end", () => broker.end());
    broker.on("end", () => client.end());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    url: `mqtt://127.0.0.1:${port}`,
    connections,
    cutOnUpstream(s) {
      needle = s;
    },
    hold() {
      held ??= [];
    },
    holdAfterUpstream(s) {
      holdNeedle = s;
    },
    resume() {
      const waiting = held ?? [];
      held = null;
      for (const write of waiting) write();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
