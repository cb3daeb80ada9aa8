/**
 * A gateway group's world for one test file: an etcd cluster, Mosquitto, the simulated
 * fenced valve over Modbus TCP, and two gateway daemons (gw-a, gw-b) with their own
 * journals, each reaching the device through its own {@link TcpLink} (which a test can cut
 * or stall). The daemons run from one bundle of the current sources (bundle.ts).
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from "../../firmware-bridge/src/simulator.ts";
import { bundleCli, type CliBundle } from "./bundle.ts";
import { DaemonProcess, gatewayConfig, valve, type LogLine } from "./daemon.ts";
import { startEtcd, type EtcdCluster, type EtcdOptions } from "./etcd.ts";
import { startMosquitto, type Broker } from "./mosquitto.ts";
import { freePort } from "./ports.ts";
import { stopDaemon, type Teardown } from "./stack.ts";
import { startTcpLink, type TcpLink } from "./tcp-link.ts";
import { TopicWatcher, until } from "./watch.ts";

export const GATEWAYS = ["gw-a", "gw-b"] as const;
export const VALVE = "valve-1";

export interface GroupOptions {
  readonly name: string;
  readonly etcd?: EtcdOptions;
  readonly leaseTtlMs?: number;
  readonly selfFenceMarginMs?: number;
  /** One etcd request over all endpoints (default a third of the TTL, at most 500 ms). */
  readonly requestTimeoutMs?: number;
  readonly sim?: Omit<SimulatorOptions, "tcp" | "serial">;
  /** Extra settings merged into each gateway's configuration. */
  readonly gateway?: Record<string, unknown>;
  /** Each gateway reaches etcd (its first member) through a link of its own, which a test can cut. */
  readonly etcdLinks?: boolean;
  /** The valve's profile (default fenced); plain means the group accepts plain devices. */
  readonly profile?: "fenced" | "plain";
  /** Each gateway serves /healthz and the status page on a port of its own (`metricsPorts`). */
  readonly metrics?: boolean;
}

export interface GroupStack {
  readonly dir: string;
  readonly etcd: EtcdCluster;
  readonly broker: Broker;
  readonly sim: SimulatorHandle;
  /** Per gateway: its link to the device. */
  readonly links: readonly TcpLink[];
  /** Per gateway: its link to etcd (with `etcdLinks`), else empty. */
  readonly etcdLinks: readonly TcpLink[];
  readonly daemons: (DaemonProcess | null)[];
  readonly leaseTtlMs: number;
  readonly selfFenceMarginMs: number;
  /** Per gateway: its metrics port (with `metrics`), else empty. */
  readonly metricsPorts: readonly number[];
  /** Starts gateway `i` on its journal (again, after a kill), its configuration changed by `edit` if given. */
  start(i: number, edit?: (config: Record<string, unknown>) => Record<string, unknown>): DaemonProcess;
  /** Gateway `i`'s configuration file (written by its last start). */
  configFile(i: number): string;
  /** Gateway `i`'s configuration as `start` writes it (before any edit). */
  configOf(i: number): Record<string, unknown>;
  /** Resolves with the index of the gateway that logs "serving as the group's active gateway" (after `since` lines of it). */
  waitActive(timeoutMs?: number, among?: readonly number[]): Promise<number>;
  /** The gateway's "serving" log line. */
  servingLine(i: number): LogLine | undefined;
  /** Each gateway's status as its retained status topic says now: active, standby, offline (or undefined). */
  roles(): (string | undefined)[];
  /** Every status message seen (for `mark()` and `waitFor()`: the moment a gateway says it is active). */
  readonly status: TopicWatcher;
  /** Resolves when one gateway says it is active and the other standby: the active one's index. */
  oneActive(timeoutMs?: number): Promise<number>;
}

export const statusTopic = (i: number) => `fencegate/gateway/${GATEWAYS[i]}/status`;

const SERVING = "serving as the group's active gateway";

export function isServing(l: LogLine): boolean {
  return l.msg === SERVING;
}

export function isSteppingDown(l: LogLine): boolean {
  return l.msg === "stepping down: device I/O stopped";
}

let bundle: Promise<CliBundle> | null = null;

export async function startGroup(teardown: Teardown, options: GroupOptions): Promise<GroupStack> {
  bundle ??= bundleCli();
  const { bin } = await bundle;
  teardown.add(null, () => {
    void bundle?.then((b) => b.remove());
    bundle = null;
  });
  const dir = teardown.add(mkdtempSync(join(tmpdir(), `fencegate-${options.name}-`)), (d) => rmSync(d, { recursive: true, force: true }));
  // A single member never holds another election after its first: a short timeout makes
  // its start quick and lets short lease TTLs fit (src/config/schema.ts, hangProblem).
  const etcdOptions = {
    ...options.etcd,
    electionTimeoutMs: options.etcd?.electionTimeoutMs ?? ((options.etcd?.members ?? 1) === 1 ? 100 : 1000),
  };
  const etcd = teardown.add(await startEtcd(etcdOptions), (e) => e.stop());
  const broker = teardown.add(await startMosquitto(), (b) => b.stop());
  const status = teardown.add(
    await TopicWatcher.connect(
      broker.url,
      GATEWAYS.map((_, i) => statusTopic(i)),
    ),
    (w) => w.close(),
  );
  const profile = options.profile ?? "fenced";
  const sim = teardown.add(await startSimulator({ rate: 0, profile, ...options.sim, tcp: { host: "127.0.0.1", port: 0 } }), (s) =>
    s.close(),
  );
  const links: TcpLink[] = [];
  for (let i = 0; i < GATEWAYS.length; i++)
    links.push(teardown.add(await startTcpLink({ host: "127.0.0.1", port: sim.tcp!.port }), (l) => l.close()));
  const etcdLinks: TcpLink[] = [];
  if (options.etcdLinks) {
    const member = new URL(etcd.endpoints[0]!);
    for (let i = 0; i < GATEWAYS.length; i++)
      etcdLinks.push(teardown.add(await startTcpLink({ host: member.hostname, port: Number(member.port) }), (l) => l.close()));
  }
  const metricsPorts: number[] = [];
  if (options.metrics) for (let i = 0; i < GATEWAYS.length; i++) metricsPorts.push(await freePort());
  const leaseTtlMs = options.leaseTtlMs ?? 2000;
  const selfFenceMarginMs = options.selfFenceMarginMs ?? 500;
  const daemons: (DaemonProcess | null)[] = GATEWAYS.map(() => null);
  teardown.add(daemons, async (ds) => {
    for (const d of ds) {
      if (d === null) continue;
      d.child.kill("SIGCONT");
      await stopDaemon(d);
    }
  });

  const config = (i: number) => {
    const id = GATEWAYS[i]!;
    const gwDir = join(dir, id);
    mkdirSync(gwDir, { recursive: true });
    return {
      ...gatewayConfig({
        brokerUrl: broker.url,
        journalPath: join(gwDir, "journal.db"),
        buses: { plc: { type: "tcp", host: "127.0.0.1", port: links[i]!.port, timeoutMs: 1000, reconnect: { minMs: 50, maxMs: 500 } } },
        actuators: [valve(VALVE, "plc", 1, profile)],
        mqtt: { keepaliveS: 5, reconnect: { minMs: 100, maxMs: 500 } },
        ...(options.metrics ? { metricsPort: metricsPorts[i]! } : {}),
      }),
      gatewayId: id,
      group: {
        name: options.name,
        endpoints: options.etcdLinks ? [`http://127.0.0.1:${etcdLinks[i]!.port}`] : etcd.endpoints,
        leaseTtlMs,
        selfFenceMarginMs,
        requestTimeoutMs: options.requestTimeoutMs ?? Math.min(500, Math.floor(leaseTtlMs / 3)),
        etcdElectionTimeoutMs: etcd.electionTimeoutMs,
        ...(profile === "plain" ? { acceptPlainDevices: true } : {}),
      },
      ...options.gateway,
    };
  };

  const stack: GroupStack = {
    dir,
    etcd,
    broker,
    sim,
    links,
    etcdLinks,
    status,
    daemons,
    leaseTtlMs,
    selfFenceMarginMs,
    metricsPorts,
    start(i, edit = (c) => c) {
      const d = DaemonProcess.start(join(dir, GATEWAYS[i]!), edit(config(i)), { bin });
      daemons[i] = d;
      return d;
    },
    configOf: config,
    configFile(i) {
      return join(dir, GATEWAYS[i]!, "gateway.yaml");
    },
    servingLine(i) {
      return daemons[i]?.logs.findLast(isServing);
    },
    roles() {
      return GATEWAYS.map((_, i) => status.last(statusTopic(i))?.payload);
    },
    async oneActive(timeoutMs = 20_000) {
      const r = () => stack.roles();
      await until(() => r().filter((x) => x === "active").length === 1 && r().filter((x) => x === "standby").length === 1, {
        timeoutMs,
        what: `one gateway active, the other standing by (${r().join(", ")})`,
      });
      return r().indexOf("active");
    },
    async waitActive(timeoutMs = 15_000, among = GATEWAYS.map((_, i) => i)) {
      const waits = among.map((i) => {
        const d = daemons[i];
        if (!d) return new Promise<never>(() => {});
        const seen = d.logs.filter(isServing).length;
        let n = 0;
        return d.waitForLog((l) => isServing(l) && ++n > seen, timeoutMs, SERVING).then(() => i);
      });
      return Promise.race(waits);
    },
  };
  return stack;
}
