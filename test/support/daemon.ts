/**
 * The real daemon as a child process (`node bin/fencegate.mjs daemon`), with its JSON log
 * captured so tests can wait for what it says, and kill it (SIGKILL) or stop it (SIGTERM).
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { NODE_FLAGS } from "../../bin/node-flags.mjs";
import { FENCED, PLAIN } from "../../packages/protocol/src/modbus-profile.ts";
import { freePort } from "./ports.ts";
import { FENCEGATE_BIN, startProcess, type ChildProcess } from "./processes.ts";

export type LogLine = Record<string, any> & { msg?: string };

/** The reference valve's points, as the fenced or plain profile lays them out. */
export function valvePoints(profile: "fenced" | "plain") {
  const r =
    profile === "fenced"
      ? { target: FENCED.TARGET_POSITION, actual: FENCED.ACTUAL_POSITION, status: FENCED.STATUS }
      : { target: PLAIN.TARGET_POSITION, actual: PLAIN.ACTUAL_POSITION, status: PLAIN.STATUS };
  return {
    position: { register: r.target, type: "u16", scale: 0.01, min: 0, max: 100, writable: true },
    actual: { register: r.actual, scale: 0.01, min: 0, max: 100 },
    status: { register: r.status },
  };
}

export function valve(id: string, bus: string, unit: number, profile: "fenced" | "plain" = "fenced", extra: Record<string, unknown> = {}) {
  return { id, bus, unit, profile, pollIntervalMs: 200, points: valvePoints(profile), ...extra };
}

export interface GatewaySetup {
  readonly brokerUrl: string;
  readonly journalPath: string;
  readonly buses: Record<string, unknown>;
  readonly actuators: unknown[];
  readonly leases?: Record<string, unknown>;
  readonly commands?: Record<string, unknown>;
  readonly mqtt?: Record<string, unknown>;
  readonly metricsPort?: number;
  /** Journal settings besides the path (the audit trail's lag, the stall deadline). */
  readonly journal?: Record<string, unknown>;
  /** More metrics settings (status page, auth) when metricsPort is given. */
  readonly metrics?: Record<string, unknown>;
}

export function gatewayConfig(s: GatewaySetup): Record<string, unknown> {
  return {
    gatewayId: "test",
    mqtt: { url: s.brokerUrl, ...s.mqtt },
    buses: s.buses,
    actuators: s.actuators,
    leases: { minTtlMs: 100, maxTtlMs: 60_000, defaultTtlMs: 5000, ...s.leases },
    commands: s.commands ?? {},
    journal: { createIfMissing: true, ...s.journal, path: s.journalPath },
    logging: { level: "debug" },
    metrics: s.metricsPort ? { enabled: true, port: s.metricsPort, ...s.metrics } : { enabled: false },
  };
}

/**
 * Writes, at `file`, the configuration of a daemon that is to stop before it connects to
 * anything (the journal tests: what happens at start): its broker and its bus are at port 1,
 * which nothing answers. Returns `file`.
 */
export function writeUnconnectedConfig(file: string, journalPath: string, journal: Record<string, unknown> = {}): string {
  const config = gatewayConfig({
    brokerUrl: "mqtt://127.0.0.1:1",
    journalPath,
    journal,
    buses: { s: { type: "tcp", host: "127.0.0.1", port: 1 } },
    actuators: [valve("valve-1", "s", 1)],
  });
  writeFileSync(file, stringify(config));
  return file;
}

/** The fatal (level 60) line among a daemon's JSON log lines (`--log-format json` on stdout). */
export function fatalLine(stdout: string): LogLine | undefined {
  return stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LogLine)
    .find((l) => l.level === 60);
}

/** Fresh metrics ports to try when a drawn one was taken before the daemon bound it. */
const METRICS_PORT_ATTEMPTS = 5;

export class DaemonProcess {
  readonly logs: LogLine[] = [];
  private readonly waiters: { pred: (l: LogLine) => boolean; resolve: (l: LogLine) => void }[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr = "";
  /** False once {@link stopCollecting} was called: stdout is still drained, no longer parsed. */
  private collecting = true;

  private constructor(readonly child: ChildProcess) {
    let buffer = "";
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      if (!this.collecting) return;
      buffer += chunk;
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        let parsed: LogLine;
        try {
          parsed = JSON.parse(line);
        } catch {
          parsed = { msg: line };
        }
        this.logs.push(parsed);
        for (const w of [...this.waiters]) {
          if (w.pred(parsed)) {
            this.waiters.splice(this.waiters.indexOf(w), 1);
            w.resolve(parsed);
          }
        }
      }
    });
    child.stderr!.setEncoding("utf8").on("data", (s: string) => (this.stderr += s));
    this.exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  }

  /**
   * Writes `config` as YAML into `dir` and starts the daemon on it, with the production V8
   * flags; from `bin` (a bundle, see bundle.ts) instead of bin/fencegate.mjs if given, on
   * the `node` binary given (the benchmark's footprint on another Node) instead of this one.
   */
  static start(
    dir: string,
    config: Record<string, unknown>,
    options: { nodeArgs?: readonly string[]; bin?: string; node?: string } = {},
  ): DaemonProcess {
    const file = join(dir, "gateway.yaml");
    writeFileSync(file, stringify(config));
    // Stopped by its owner (stopDaemon, kill()), which knows whether to let it drain.
    const child = startProcess(null, options.node ?? process.execPath, [
      ...NODE_FLAGS,
      ...(options.nodeArgs ?? []),
      options.bin ?? FENCEGATE_BIN,
      "daemon",
      "--config",
      file,
    ]);
    return new DaemonProcess(child);
  }

  /**
   * Starts the daemon with its metrics listener on a free port, `configFor(port)` being its
   * configuration. A port found free a moment ago may be taken before the daemon binds it
   * (any listen(0) or outgoing connection on the machine can be handed it): only when the
   * daemon's own bind says so (its fatal line names metrics.port, in use) is another drawn.
   * Resolves once the daemon said it started, which it does after binding.
   */
  static async startOnFreeMetricsPort(
    dir: string,
    configFor: (metricsPort: number) => Record<string, unknown>,
    options: { nodeArgs?: readonly string[]; bin?: string } = {},
  ): Promise<{ daemon: DaemonProcess; metricsPort: number }> {
    for (let attempt = 1; ; attempt++) {
      const metricsPort = await freePort();
      const daemon = DaemonProcess.start(dir, configFor(metricsPort), options);
      try {
        await daemon.waitForLog((l) => l.msg === "fencegate daemon started", 15_000, "its start");
        return { daemon, metricsPort };
      } catch (err) {
        const out = daemon.child.stdout!;
        const exited = daemon.child.exitCode !== null || daemon.child.signalCode !== null;
        // 'exit' can come before the last of stdout: read the fatal line before judging.
        if (exited && !out.destroyed) await new Promise((resolve) => out.once("close", resolve));
        const taken = daemon.logs.some((l) => l.setting === "metrics.port" && / is in use /.test(l.msg ?? ""));
        if (!taken || attempt === METRICS_PORT_ATTEMPTS) {
          await daemon.kill();
          throw err;
        }
      }
    }
  }

  /**
   * Stops parsing and keeping log lines (a benchmark under load: parsing thousands of lines
   * a second would take CPU from the processes being measured). The pipe is still drained.
   */
  stopCollecting(): void {
    this.collecting = false;
  }

  /** Resolves with the first log line (past or future) that `pred` accepts. */
  waitForLog(pred: (l: LogLine) => boolean, timeoutMs = 10_000, what = "log line"): Promise<LogLine> {
    const seen = this.logs.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `daemon did not log ${what} within ${timeoutMs} ms; stderr: ${this.stderr}; last lines: ${JSON.stringify(this.logs.slice(-5))}`,
            ),
          ),
        timeoutMs,
      );
      this.waiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
      });
      void this.exited.then(({ code, signal }) =>
        reject(new Error(`daemon exited (${code ?? signal}) before logging ${what}; stderr: ${this.stderr}`)),
      );
    });
  }

  /** Ready to serve: MQTT connected and each fenced actuator's device fence read. */
  async ready(fencedActuators: readonly string[], timeoutMs = 15_000): Promise<void> {
    await this.waitForLog((l) => l.msg === "MQTT connected", timeoutMs, "MQTT connected");
    for (const a of fencedActuators)
      await this.waitForLog((l) => l.msg === "device fence read" && l.actuator === a, timeoutMs, `the fence of ${a}`);
  }

  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.exited;
  }
}
