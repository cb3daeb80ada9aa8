/**
 * Readiness and watchdog notifications to systemd (sd_notify), without a native module.
 *
 * sd_notify is one datagram on the AF_UNIX SOCK_DGRAM socket named by $NOTIFY_SOCKET; Node
 * cannot send on such a socket (node:dgram is UDP only, node:net is stream only). So each
 * notification runs `systemd-notify VAR=VALUE...`, which ships with systemd itself. The
 * trade-off, and why it is still the robust choice here:
 *
 * - The sender is a short-lived child, not the main PID, so the unit needs
 *   `NotifyAccess=all`: any process of the service's cgroup may then notify. The only
 *   other child is tsx's esbuild service, which never notifies.
 * - systemd attributes a message to a unit by the sender's cgroup, looked up from its PID;
 *   a sender that already exited could be dropped. systemd-notify (systemd ≥ 246) waits on
 *   a BARRIER=1 until the manager has processed the message, so the child is still alive
 *   while it is attributed. Do not pass `--no-block`.
 * - `--pid` is not used: faking the sender's credentials needs CAP_SYS_ADMIN, which the
 *   unit does not have, and it would also send MAINPID=.
 * - systemd-notify runs from a relay, one shell started with the notifier that runs it for
 *   each line the daemon writes (fields joined by tabs) and answers ok or fail. The daemon
 *   itself starts no process while it serves: starting one waits for the kernel's lock on
 *   the daemon's memory map, which the journal's writer thread holds while it faults on a
 *   frozen disk (docs/deploy.md, "The journal's disk"), and would stop the event loop there.
 * - Costs one process per ping in the relay (~50 ms wall, mostly waiting, on a desktop CPU);
 *   at one ping per WatchdogSec/3 that is nothing.
 *
 * Pings come from a timer on the daemon's event loop, and only when `healthy()` says so:
 * a blocked loop or a failed journal stops them, and systemd restarts the service after
 * WatchdogSec.
 */
import { spawn, type ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import type { Logger } from "pino";

export interface NotifyEnvironment {
  readonly NOTIFY_SOCKET?: string | undefined;
  readonly WATCHDOG_USEC?: string | undefined;
  readonly WATCHDOG_PID?: string | undefined;
}

/**
 * The ping interval for this process, or null when systemd set no watchdog for it (as
 * sd_watchdog_enabled: WATCHDOG_USEC set, and WATCHDOG_PID, if set, is this process).
 * A third of the timeout, so one late or lost ping does not cost a restart.
 */
export function watchdogIntervalMs(env: NotifyEnvironment, pid: number): number | null {
  if (!env.NOTIFY_SOCKET || !env.WATCHDOG_USEC) return null;
  if (env.WATCHDOG_PID !== undefined && env.WATCHDOG_PID !== "" && Number(env.WATCHDOG_PID) !== pid) return null;
  const usec = Number(env.WATCHDOG_USEC);
  if (!Number.isSafeInteger(usec) || usec <= 0) return null;
  return Math.max(1, Math.floor(usec / 3000));
}

export interface SystemdNotifierOptions {
  readonly log: Logger;
  readonly env?: NotifyEnvironment;
  /** The program to run; default `systemd-notify` from PATH. */
  readonly command?: string;
  /** How long one systemd-notify may take before it is killed (it waits on a barrier). */
  readonly timeoutMs?: number;
}

/**
 * The relay's script: $0 is the timeout in seconds for one systemd-notify, $1 the program.
 * Fields come tab-separated, one notification a line; globbing is off, so no field expands.
 */
const RELAY = `set -f
IFS="$(printf '\t')"
while read -r line; do
  if out=$(timeout "$0" "$1" $line 2>&1); then echo ok; else echo "fail $(printf %s "$out" | tr '\n' ' ')"; fi
done`;

type Relay = ChildProcessByStdio<Writable, Readable, null>;

export class SystemdNotifier {
  private readonly command: string;
  private readonly timeoutMs: number;
  private readonly log: Logger;
  private readonly env: NotifyEnvironment;
  private watchdog: NodeJS.Timeout | null = null;
  /** The ping being sent, if any: at most one at a time, and STOPPING=1 waits for it. */
  private inFlight: Promise<boolean> | null = null;
  private warnedFailure = false;
  private relay: Relay | null = null;
  /** The answers the relay owes, in the order the lines were written. */
  private readonly owed: ((answer: string) => void)[] = [];

  private constructor(options: SystemdNotifierOptions) {
    this.log = options.log;
    this.env = options.env ?? process.env;
    this.command = options.command ?? "systemd-notify";
    this.timeoutMs = options.timeoutMs ?? 5000;
  }

  /** A notifier when run by systemd with a notify socket (Type=notify or WatchdogSec=), else null. */
  static fromEnvironment(options: SystemdNotifierOptions): SystemdNotifier | null {
    const env = options.env ?? process.env;
    if (!env.NOTIFY_SOCKET) return null;
    const notifier = new SystemdNotifier(options);
    notifier.startRelay();
    return notifier;
  }

  /** Sends `fields` (e.g. READY=1); resolves false, after one warning, when it could not. */
  send(fields: readonly string[]): Promise<boolean> {
    return new Promise((resolve) => {
      const relay = this.relay ?? this.startRelay();
      // The relay answers within its own timeout; past this one it is taken for stuck and replaced.
      const backstop = setTimeout(() => this.endRelay(relay, "no answer from the relay"), this.timeoutMs + 1000);
      backstop.unref();
      this.owed.push((answer) => {
        clearTimeout(backstop);
        if (answer === "ok") return resolve(true);
        if (!this.warnedFailure) {
          this.warnedFailure = true;
          this.log.warn(
            { command: this.command, err: answer.replace(/^fail ?/, "") },
            "cannot notify systemd; with WatchdogSec set the service will be restarted. Is systemd-notify installed, and NotifyAccess=all set in the unit?",
          );
        }
        resolve(false);
      });
      relay.stdin.write(`${fields.map((f) => f.replace(/[\t\r\n]/g, " ")).join("\t")}\n`);
    });
  }

  /** Started with the notifier, before the daemon serves; again only if it ended. */
  private startRelay(): Relay {
    const relay = spawn("sh", ["-c", RELAY, String(Math.max(1, Math.ceil(this.timeoutMs / 1000))), this.command], {
      stdio: ["pipe", "pipe", "ignore"],
      env: { ...process.env, ...this.env },
    });
    this.relay = relay;
    let buffer = "";
    relay.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      buffer += chunk;
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        const answer = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        this.owed.shift()?.(answer);
      }
    });
    relay.stdin.on("error", () => {}); // a relay that ended: its exit fails what it owed
    relay.on("error", (err) => this.endRelay(relay, `the relay did not start: ${err.message}`));
    relay.on("exit", () => this.endRelay(relay, "the relay ended"));
    // Neither it nor its pipes keep the daemon alive.
    relay.unref();
    (relay.stdin as Writable & { unref?: () => void }).unref?.();
    (relay.stdout as Readable & { unref?: () => void }).unref?.();
    return relay;
  }

  private endRelay(relay: Relay, why: string): void {
    if (this.relay !== relay) return;
    this.relay = null;
    relay.kill();
    for (const owed of this.owed.splice(0)) owed(`fail ${why}`);
  }

  ready(status: string): Promise<boolean> {
    return this.send(["READY=1", `STATUS=${status}`]);
  }

  async stopping(): Promise<boolean> {
    this.stopWatchdog();
    await this.inFlight;
    const sent = await this.send(["STOPPING=1", "STATUS=draining and stopping"]);
    this.relay?.stdin.end(); // its last line: the relay's shell ends
    return sent;
  }

  /**
   * Pings WATCHDOG=1 every WatchdogSec/3 while `problem()` returns null; a problem is logged
   * once per change and the pings stop until it clears. Returns false when systemd set no
   * watchdog.
   */
  startWatchdog(problem: () => string | null, pid = process.pid): boolean {
    const intervalMs = watchdogIntervalMs(this.env, pid);
    if (intervalMs === null) return false;
    let expectedAtMs = performance.now() + intervalMs;
    let lastProblem: string | null = null;
    const tick = () => {
      const lateMs = performance.now() - expectedAtMs;
      expectedAtMs = performance.now() + intervalMs;
      if (lateMs > intervalMs)
        this.log.warn({ lateMs: Math.round(lateMs) }, "the event loop was blocked; the systemd watchdog ping was late");
      const now = problem();
      if (now !== lastProblem) {
        if (now !== null) this.log.error({ problem: now }, "unhealthy: no more systemd watchdog pings until this clears");
        else this.log.info("healthy again: systemd watchdog pings resume");
        lastProblem = now;
      }
      if (now !== null || this.inFlight) return;
      this.inFlight = this.send(["WATCHDOG=1"]).finally(() => (this.inFlight = null));
    };
    this.watchdog = setInterval(tick, intervalMs);
    this.watchdog.unref();
    this.log.info({ intervalMs }, "systemd watchdog enabled");
    return true;
  }

  stopWatchdog(): void {
    if (this.watchdog) clearInterval(this.watchdog);
    this.watchdog = null;
  }
}
