/**
 * A stand-in for systemd's notify socket: an AF_UNIX datagram socket (Node cannot open one,
 * so a perl one-liner does) that records every datagram. Like systemd, it reads without
 * taking file descriptors, so the kernel closes the BARRIER=1 pipe that systemd-notify
 * sends and waits on.
 */
import { join } from "node:path";
import { startProcess } from "../../support/processes.ts";

const RECEIVER = `
use Socket;
socket(S, PF_UNIX, SOCK_DGRAM, 0) or die "socket: $!";
bind(S, pack_sockaddr_un($ARGV[0])) or die "bind: $!";
$| = 1;
print "ready\\n";
while (defined(recv(S, $b, 65536, 0))) { print unpack("H*", $b), "\\n" }
`;

export interface NotifySocket {
  readonly path: string;
  /** Every datagram so far, each as its lines ("READY=1", "WATCHDOG=1", ...). */
  readonly messages: string[][];
  /** Resolves when a datagram containing `line` has arrived (counting earlier ones). */
  waitFor(line: string, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function openNotifySocket(dir: string): Promise<NotifySocket> {
  const path = join(dir, "notify");
  const child = startProcess(null, "perl", ["-e", RECEIVER, path]);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const messages: string[][] = [];
  const listeners = new Set<() => void>();
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  let buffer = "";
  const ready = new Promise<void>((resolve, reject) => {
    child.once("exit", () => reject(new Error(`notify receiver exited: ${stderr}`)));
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      buffer += chunk;
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line === "ready") resolve();
        else
          messages.push(
            Buffer.from(line, "hex")
              .toString("utf8")
              .split("\n")
              .filter((l) => l !== ""),
          );
        for (const l of listeners) l();
      }
    });
  });
  await ready;
  return {
    path,
    messages,
    waitFor(line, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!messages.some((m) => m.includes(line))) return;
          listeners.delete(check);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`no ${line} within ${timeoutMs} ms; got ${JSON.stringify(messages)}`));
        }, timeoutMs);
        listeners.add(check);
        check();
      });
    },
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
