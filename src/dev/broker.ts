/**
 * A broker for the demo and the embedded defaults, so they need nothing but Node on a
 * fresh machine: the local broker at the given address if one answers, otherwise an
 * in-process aedes broker. aedes speaks MQTT 3.1.1 only (it has no v5), so clients of an
 * embedded broker must use protocol version 4; the gateway then replies on B/A/reply/H.
 */
import net from "node:net";
import { Aedes } from "aedes";

export interface DevBroker {
  readonly url: string;
  readonly embedded: boolean;
  /** 5 for a real broker, 4 for the embedded one. */
  readonly protocolVersion: 4 | 5;
  close(): Promise<void>;
}

function answers(host: string, port: number, timeoutMs = 300): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
    socket.setTimeout(timeoutMs, () => done(false));
  });
}

/** Uses mqtt://host:port if a broker answers there; otherwise embeds one on that port (0: any). */
export async function localOrEmbeddedBroker(host = "127.0.0.1", port = 1883): Promise<DevBroker> {
  if (port !== 0 && (await answers(host, port))) {
    return { url: `mqtt://${host}:${port}`, embedded: false, protocolVersion: 5, close: async () => {} };
  }
  return embeddedBroker(host, port);
}

export async function embeddedBroker(host = "127.0.0.1", port = 0): Promise<DevBroker> {
  const aedes = await Aedes.createBroker();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    aedes.handle(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as net.AddressInfo).port;
  return {
    url: `mqtt://${host}:${bound}`,
    embedded: true,
    protocolVersion: 4,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
