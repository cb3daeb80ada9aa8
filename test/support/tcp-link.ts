/**
 * A TCP link between one gateway and a Modbus TCP device, that a test can cut or stall:
 *
 * - `hold()`: bytes from the gateway are kept, not forwarded (a frame stuck in a converter or
 *   a switch buffer); `release()` delivers them in order, even if the gateway has closed its
 *   end meanwhile, and forwards again.
 * - `cut()`: every connection is dropped and new ones are refused until `restore()`.
 */
import net from "node:net";

export interface TcpLink {
  readonly port: number;
  /** Bytes from the gateway held back so far (since the last release). */
  readonly heldBytes: number;
  /** Modbus TCP requests held back so far that write registers (FC16): a command block or a fence raise. */
  readonly heldWrites: number;
  hold(): void;
  release(): void;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

interface Pipe {
  readonly gateway: net.Socket;
  readonly device: net.Socket;
  held: Buffer[];
  gatewayEnded: boolean;
}

export async function startTcpLink(target: { host: string; port: number }): Promise<TcpLink> {
  const pipes = new Set<Pipe>();
  let holding = false;
  let cut = false;

  const flush = (pipe: Pipe) => {
    for (const chunk of pipe.held.splice(0)) pipe.device.write(chunk);
    if (pipe.gatewayEnded) pipe.device.end();
  };

  const server = net.createServer((gateway) => {
    if (cut) {
      gateway.destroy();
      return;
    }
    const device = net.connect(target);
    const pipe: Pipe = { gateway, device, held: [], gatewayEnded: false };
    pipes.add(pipe);
    for (const s of [gateway, device]) s.setNoDelay(true);
    gateway.on("data", (chunk: Buffer) => {
      if (holding) pipe.held.push(chunk);
      else device.write(chunk);
    });
    device.on("data", (chunk: Buffer) => {
      if (!gateway.destroyed) gateway.write(chunk);
    });
    // The gateway's end going away must not take held bytes with it: they are on their way.
    gateway.on("close", () => {
      pipe.gatewayEnded = true;
      if (!holding) {
        device.end();
        pipes.delete(pipe);
      }
    });
    gateway.on("error", () => {});
    device.on("error", () => gateway.destroy());
    device.on("close", () => {
      gateway.destroy();
      pipes.delete(pipe);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;

  return {
    port,
    get heldBytes() {
      let n = 0;
      for (const p of pipes) for (const c of p.held) n += c.length;
      return n;
    },
    get heldWrites() {
      let n = 0;
      for (const p of pipes) n += fc16Requests(Buffer.concat(p.held));
      return n;
    },
    hold() {
      holding = true;
    },
    release() {
      holding = false;
      for (const p of pipes) flush(p);
    },
    cut() {
      cut = true;
      for (const p of pipes) {
        p.gateway.destroy();
        p.device.destroy();
      }
      pipes.clear();
    },
    restore() {
      cut = false;
    },
    async close() {
      for (const p of pipes) {
        p.gateway.destroy();
        p.device.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Counts the FC16 requests in a run of Modbus TCP frames (7-byte MBAP header, then the PDU). */
function fc16Requests(bytes: Buffer): number {
  let n = 0;
  for (let at = 0; at + 8 <= bytes.length; at += 6 + bytes.readUInt16BE(at + 4)) {
    if (bytes[at + 7] === 16) n++;
  }
  return n;
}
