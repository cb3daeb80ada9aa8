/**
 * A private etcd cluster for one test file (Debian's etcd-server): 1 or 3 members on free
 * loopback ports, data in a temp dir. Members can be killed and started again on their data
 * (a member restart), or the whole cluster stopped. Optionally TLS with client certificates
 * and etcd's own authentication (a root user), to test the gateway's client against both.
 */
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { portBelowEphemeral } from "./ports.ts";
import { startProcess, type ChildProcess } from "./processes.ts";

export interface EtcdTls {
  readonly caFile: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** The client certificate etcd's own readiness probes use (it must be signed by caFile). */
  readonly client: { readonly certFile: string; readonly keyFile: string };
}

export interface EtcdOptions {
  readonly members?: 1 | 3;
  readonly tls?: EtcdTls;
  /** Turn on etcd authentication with this root password (after the cluster is up). */
  readonly rootPassword?: string;
  /** The members' --election-timeout (default etcd's, 1000); the heartbeat is a tenth of it. */
  readonly electionTimeoutMs?: number;
}

export interface EtcdMember {
  readonly name: string;
  readonly clientUrl: string;
  readonly running: boolean;
  /** The child process, while running (tests send it SIGSTOP/SIGCONT). */
  readonly child: ChildProcess | null;
}

export interface EtcdCluster {
  readonly dir: string;
  readonly members: readonly EtcdMember[];
  /** Every member's client URL, for the gateway's `group.endpoints`. */
  readonly endpoints: string[];
  /** The members' --election-timeout: the gateway's `group.etcdElectionTimeoutMs`. */
  readonly electionTimeoutMs: number;
  /** SIGKILL one member (a crash). */
  kill(index: number): Promise<void>;
  /** Starts a killed member again on its data dir and waits until it reports healthy. */
  restart(index: number): Promise<void>;
  /**
   * The index of the member every running member that answers names as the raft leader, or null
   * while they do not agree on a running one (an election under way, or no quorum). Member
   * `ignoring` (a SIGSTOPped one that may be thawed while asked) has no say.
   */
  leader(ignoring?: number): Promise<number | null>;
  /** Asks `leader()` until the running members agree on one (an election has ended); throws after `timeoutMs`. */
  waitForLeader(timeoutMs: number): Promise<number>;
  /** POSTs a v3 JSON API request to the first running member; throws on a non-2xx answer. */
  call(path: string, body: unknown, token?: string): Promise<any>;
  /** Stops every member (SIGTERM, SIGKILL after a grace: the last member may linger) and removes the dir. */
  stop(): Promise<void>;
}

/** How long a member may take to exit after SIGTERM before it is SIGKILLed. */
const STOP_GRACE_MS = 2000;

interface Member {
  readonly name: string;
  readonly clientPort: number;
  readonly peerPort: number;
  child: ChildProcess | null;
  exited: Promise<void>;
  output: string;
}

export async function startEtcd(options: EtcdOptions = {}): Promise<EtcdCluster> {
  const count = options.members ?? 1;
  const tls = options.tls;
  const scheme = tls ? "https" : "http";
  const dir = mkdtempSync(join(tmpdir(), "fencegate-etcd-"));
  const members: Member[] = [];
  for (let i = 0; i < count; i++) {
    members.push({
      name: `e${i + 1}`,
      clientPort: await portBelowEphemeral(),
      peerPort: await portBelowEphemeral(),
      child: null,
      exited: Promise.resolve(),
      output: "",
    });
  }
  const clientUrl = (m: Member) => `${scheme}://127.0.0.1:${m.clientPort}`;
  const initialCluster = members.map((m) => `${m.name}=http://127.0.0.1:${m.peerPort}`).join(",");
  const token = `fencegate-test-${process.pid}-${Date.now()}`;
  const electionTimeoutMs = options.electionTimeoutMs ?? 1000;

  const launch = (m: Member) => {
    const args = [
      "--name",
      m.name,
      "--data-dir",
      join(dir, m.name),
      "--listen-client-urls",
      clientUrl(m),
      "--advertise-client-urls",
      clientUrl(m),
      "--listen-peer-urls",
      `http://127.0.0.1:${m.peerPort}`,
      "--initial-advertise-peer-urls",
      `http://127.0.0.1:${m.peerPort}`,
      "--initial-cluster",
      initialCluster,
      "--initial-cluster-token",
      token,
      "--initial-cluster-state",
      "new",
      "--logger",
      "zap",
      "--log-outputs",
      "stderr",
      "--log-level",
      "warn",
      "--election-timeout",
      String(electionTimeoutMs),
      "--heartbeat-interval",
      String(Math.max(10, Math.floor(electionTimeoutMs / 10))),
      ...(tls ? ["--cert-file", tls.certFile, "--key-file", tls.keyFile, "--trusted-ca-file", tls.caFile, "--client-cert-auth"] : []),
    ];
    // Members are killed and restarted by their tests, and stopped by the cluster's stop().
    const child = startProcess(null, "etcd", args);
    m.child = child;
    m.output = "";
    child.stdout!.on("data", (d: Buffer) => (m.output = (m.output + d.toString()).slice(-4000)));
    child.stderr!.on("data", (d: Buffer) => (m.output = (m.output + d.toString()).slice(-4000)));
    m.exited = new Promise((resolve) => child.once("exit", () => resolve()));
  };

  const agentOptions = tls
    ? { ca: readFileSync(tls.caFile), cert: readFileSync(tls.client.certFile), key: readFileSync(tls.client.keyFile) }
    : {};
  const request = (m: Member, method: string, path: string, body?: unknown, authToken?: string): Promise<{ status: number; json: any }> =>
    new Promise((resolve, reject) => {
      const transport = tls ? https : http;
      const req = transport.request(
        {
          host: "127.0.0.1",
          port: m.clientPort,
          path,
          method,
          timeout: 2000,
          headers: authToken ? { authorization: authToken } : {},
          ...agentOptions,
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8").on("data", (s: string) => (text += s));
          res.on("end", () => {
            try {
              resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) });
            } catch {
              resolve({ status: res.statusCode ?? 0, json: { text } });
            }
          });
        },
      );
      req.on("timeout", () => req.destroy(new Error("timeout")));
      req.on("error", reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });

  const healthy = async (m: Member, timeoutMs: number) => {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const ok = await request(m, "GET", "/health").then(
        (r) => r.status === 200 && r.json.health === "true",
        () => false,
      );
      if (ok) return;
      if (m.child === null || m.child.exitCode !== null) throw new Error(`etcd ${m.name} exited: ${m.output}`);
      if (Date.now() > until) throw new Error(`etcd ${m.name} not healthy after ${timeoutMs} ms: ${m.output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  const stopMember = async (m: Member, signal: NodeJS.Signals) => {
    const child = m.child;
    if (child === null) return;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGCONT");
      child.kill(signal);
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
      await m.exited;
      clearTimeout(timer);
    }
    m.child = null;
  };

  const firstRunning = () => {
    const m = members.find((x) => x.child !== null);
    if (!m) throw new Error("no etcd member is running");
    return m;
  };

  const cluster: EtcdCluster = {
    dir,
    get members() {
      return members.map((m) => ({ name: m.name, clientUrl: clientUrl(m), running: m.child !== null, child: m.child }));
    },
    endpoints: members.map(clientUrl),
    electionTimeoutMs,
    async kill(index) {
      await stopMember(members[index]!, "SIGKILL");
    },
    async restart(index) {
      const m = members[index]!;
      if (m.child !== null) throw new Error(`etcd ${m.name} is running`);
      launch(m);
      await healthy(m, 20_000);
    },
    async leader(ignoring) {
      const running = members.filter((m, i) => m.child !== null && i !== ignoring);
      const statuses = await Promise.all(running.map((m) => request(m, "POST", "/v3/maintenance/status", {}).catch(() => null)));
      const ids = statuses.map((s) => (s?.status === 200 ? String(s.json.header?.member_id ?? "") : ""));
      // A member that does not answer (a SIGSTOPped leader) has no say.
      const named = new Set(statuses.filter((s) => s?.status === 200).map((s) => String(s!.json.leader ?? "")));
      const leaderId = named.size === 1 ? [...named][0]! : "";
      const at = leaderId === "" ? -1 : ids.indexOf(leaderId);
      return at === -1 ? null : members.indexOf(running[at]!);
    },
    async waitForLeader(timeoutMs) {
      for (const end = performance.now() + timeoutMs; ;) {
        const at = await cluster.leader();
        if (at !== null) return at;
        if (performance.now() > end) throw new Error(`the running etcd members agreed on no leader within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async call(path, body, authToken) {
      const { status, json } = await request(firstRunning(), "POST", path, body, authToken);
      if (status < 200 || status > 299) throw new Error(`etcd ${path}: HTTP ${status} ${JSON.stringify(json)}`);
      return json;
    },
    async stop() {
      await Promise.all(members.map((m) => stopMember(m, "SIGTERM")));
      rmSync(dir, { recursive: true, force: true });
    },
  };

  try {
    for (const m of members) launch(m);
    await Promise.all(members.map((m) => healthy(m, 20_000)));
    if (options.rootPassword !== undefined) {
      await cluster.call("/v3/auth/user/add", { name: "root", password: options.rootPassword });
      await cluster.call("/v3/auth/user/grant", { user: "root", role: "root" });
      await cluster.call("/v3/auth/enable", {});
    }
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}
