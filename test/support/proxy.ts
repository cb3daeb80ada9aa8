/**
 * A TCP proxy between the daemon and the broker, to play a broker that cuts a client off
 * for one particular packet: it forwards both ways, records what each connection sent
 * upstream, and drops a connection (both sides, the offending bytes unforwarded) the first
 * time its upstream bytes contain a given string.
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
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const connections: ProxiedConnection[] = [];
  const sockets = new Set<net.Socket>();
  let needle: string | null = null;
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
      broker.write(chunk);
    });
    broker.on("data", (chunk: Buffer) => client.write(chunk));
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
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
