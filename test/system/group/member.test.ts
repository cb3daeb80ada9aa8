/**
 * The group member against a real etcd (Debian's etcd-server, started on free ports):
 * campaigning, handing over, committing tokens under leadership, TLS with client
 * certificates and a password, and a 3-member cluster losing a member, then its quorum.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EtcdClient } from "../../../src/adapters/etcd/client.ts";
import { EtcdGroupMember } from "../../../src/adapters/etcd/member.ts";
import { etcdClientFor } from "../../../src/config/etcd.ts";
import { parseConfig } from "../../../src/config/parse.ts";
import { leadershipConfig, type StepDownReason } from "../../../src/core/leadership.ts";
import { realClock, realScheduler } from "../../../src/adapters/platform.ts";
import { checkGroup } from "../../../src/doctor/checks.ts";
import { makePki } from "../broker-security/pki.ts";
import { startEtcd, type EtcdCluster } from "../../support/etcd.ts";

const log = pino({ level: "silent" });
/** A valid configuration around the group section under test. */
const DOCTOR_BASE = {
  gatewayId: "gw-a",
  mqtt: { url: "mqtt://127.0.0.1:1883" },
  buses: { plc: { type: "tcp", host: "127.0.0.1" } },
  actuators: [
    { id: "valve-1", bus: "plc", unit: 1, profile: "fenced", points: { position: { register: 0x20, min: 0, max: 100, writable: true } } },
  ],
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Probe {
  readonly member: EtcdGroupMember;
  readonly client: EtcdClient;
  activations: number;
  activatedAtMs: number[];
  deactivations: { reason: StepDownReason; atMs: number }[];
}

function member(client: EtcdClient, gatewayId: string, group: string, ttlMs = 3000, marginMs = 500): Probe {
  const probe: Probe = {
    client,
    activations: 0,
    activatedAtMs: [],
    deactivations: [],
    member: new EtcdGroupMember({
      client,
      group,
      gatewayId,
      config: leadershipConfig(ttlMs, marginMs),
      clock: realClock,
      scheduler: realScheduler,
      log,
      onActivate: () => {
        probe.activations++;
        probe.activatedAtMs.push(performance.now());
      },
      onDeactivate: (reason) => probe.deactivations.push({ reason, atMs: performance.now() }),
    }),
  };
  return probe;
}

async function until(what: string, pred: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!pred()) {
    if (performance.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(10);
  }
}

let groups = 0;
const nextGroup = () => `g${process.pid}-${++groups}`;

describe("group member on a 1-member etcd", () => {
  let etcd: EtcdCluster;
  const probes: Probe[] = [];
  const make = (...args: Parameters<typeof member>) => {
    const p = member(...args);
    probes.push(p);
    return p;
  };
  const client = () => new EtcdClient({ endpoints: etcd.endpoints, requestTimeoutMs: 1000 });

  beforeAll(async () => {
    etcd = await startEtcd({ electionTimeoutMs: 100 }); // one member: no election after its first
  });
  afterAll(async () => {
    for (const p of probes) {
      await p.member.stop();
      p.client.close();
    }
    await etcd?.stop();
  });

  it("two members started at once: exactly one becomes active, every time (10 rounds)", async () => {
    for (let round = 0; round < 10; round++) {
      const group = nextGroup();
      const a = make(client(), "gw-a", group);
      const b = make(client(), "gw-b", group);
      a.member.start();
      b.member.start();
      await until("one active", () => a.member.phase === "active" || b.member.phase === "active");
      await sleep(300); // a second activation would come within a look or two
      expect([a.member.phase, b.member.phase].filter((p) => p === "active")).toHaveLength(1);
      expect(a.activations + b.activations).toBe(1);
      expect([a.member.mayDriveDevices(), b.member.mayDriveDevices()].filter(Boolean)).toHaveLength(1);
      await a.member.stop();
      await b.member.stop();
    }
  });

  it("hands over at once when the active member stops (its lease is revoked), not after the TTL", async () => {
    const group = nextGroup();
    const a = make(client(), "gw-a", group, 10_000, 1000);
    a.member.start();
    await until("a active", () => a.member.phase === "active");
    const b = make(client(), "gw-b", group, 10_000, 1000);
    b.member.start();
    await until("b standby", () => b.member.phase === "standby");
    const stoppedAt = performance.now();
    await a.member.stop();
    expect(a.member.mayDriveDevices()).toBe(false);
    await until("b active", () => b.member.phase === "active", 3000);
    expect(performance.now() - stoppedAt).toBeLessThan(1500);
  });

  it("takes over after the TTL when the active member vanishes without a word", async () => {
    const group = nextGroup();
    const a = make(client(), "gw-a", group, 2000, 500);
    a.member.start();
    await until("a active", () => a.member.phase === "active");
    const b = make(client(), "gw-b", group, 2000, 500);
    b.member.start();
    await until("b standby", () => b.member.phase === "standby");
    // A crash: a's renewals stop (its client is closed), its lease runs out in etcd.
    a.client.close();
    const lostAt = performance.now();
    await until("b active", () => b.member.phase === "active", 6000);
    expect(b.activatedAtMs[0]! - lostAt).toBeLessThan(2000 + 1000);
    // a stopped driving devices before b started: it fenced itself by its own clock.
    expect(a.deactivations[0]?.reason).toBe("renewal-overdue");
    expect(a.deactivations[0]!.atMs).toBeLessThan(b.activatedAtMs[0]!);
    expect(a.member.mayDriveDevices()).toBe(false);
  });

  it("commits tokens only above the group's counter and only while leading; a deposed member's commit is stale", async () => {
    const group = nextGroup();
    const a = make(client(), "gw-a", group);
    a.member.start();
    await until("a active", () => a.member.phase === "active");
    expect(await a.member.readToken("valve-1")).toBe(0);
    expect(await a.member.commitGrant("valve-1", 1)).toEqual({ ok: true });
    expect(await a.member.commitGrant("valve-1", 2)).toEqual({ ok: true });
    expect(await a.member.readToken("valve-1")).toBe(2);
    // Not above what the group holds: refused, and a sign that this gateway's view is behind.
    expect(await a.member.commitGrant("valve-1", 2)).toMatchObject({ ok: false, stale: true });
    // A jump (a grant whose commit timed out burned a token) is fine.
    expect(await a.member.commitGrant("valve-1", 5)).toEqual({ ok: true });
    // Counters are per actuator, and 16 digits keep etcd's byte order numeric past 9.
    expect(await a.member.commitGrant("valve-2", 9)).toEqual({ ok: true });
    expect(await a.member.commitGrant("valve-2", 10)).toEqual({ ok: true });
    expect(await a.member.readToken("valve-2")).toBe(10);

    // a's leader key is deleted behind its back (an operator, or its lease revoked): b leads.
    await etcd.call("/v3/kv/deleterange", { key: Buffer.from(a.member.leaderKey).toString("base64") });
    const b = make(client(), "gw-b", group);
    b.member.start();
    await until("b active", () => b.member.phase === "active");
    expect(await b.member.readToken("valve-1")).toBe(5);
    expect(await a.member.commitGrant("valve-1", 6)).toEqual({
      ok: false,
      stale: true,
      message: "the leader key is no longer this gateway's: another gateway leads the group",
    });
    expect(await b.member.commitGrant("valve-1", 6)).toEqual({ ok: true });
    // a's periodic look finds the key is b's: it steps down by itself.
    await until("a deposed", () => a.deactivations.some((d) => d.reason === "deposed"), 3000);
  });

  it("fencegate doctor names who leads the group", async () => {
    const group = nextGroup();
    const config = (name: string) =>
      parseConfig({
        ...DOCTOR_BASE,
        group: {
          name,
          endpoints: etcd.endpoints,
          leaseTtlMs: 3000,
          selfFenceMarginMs: 500,
          requestTimeoutMs: 500,
          etcdElectionTimeoutMs: etcd.electionTimeoutMs,
        },
      }).group!;
    expect(await checkGroup(config(group))).toMatchObject({
      status: "ok",
      message: `etcd answers at ${etcd.endpoints.join(", ")}; group ${group} is led by nobody yet. A hung etcd leader is ridden out with 800 ms to spare if the members' --election-timeout is 100 ms (group.etcdElectionTimeoutMs).`,
    });
    const a = make(client(), "gw-a", group);
    a.member.start();
    await until("a active", () => a.member.phase === "active");
    expect((await checkGroup(config(group))).message).toMatch(/is led by gw-a\. A hung etcd leader/);
  });

  it("a grant whose first etcd answer was lost, retried on another endpoint, counts as committed (the retry finds its own token)", async () => {
    // The first endpoint forwards the transaction to etcd and swallows etcd's answer: a member
    // that applied the commit and then fell silent (an election, a cut link). The client then
    // asks the next endpoint, where the compare finds the token already there.
    let swallowed = 0;
    let armed = false; // the campaign's and the first token's transactions pass
    const silent = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const upstream = http.request(
          `${etcd.endpoints[0]}${req.url}`,
          { method: "POST", headers: { "content-type": "application/json" } },
          (answer) => {
            const body: Buffer[] = [];
            answer.on("data", (c: Buffer) => body.push(c));
            answer.on("end", () => {
              const isGrant = req.url === "/v3/kv/txn" && Buffer.concat(chunks).toString().includes('"requestPut"');
              if (armed && isGrant && swallowed === 0) {
                swallowed++;
                return; // never answered: the client's attempt times out
              }
              res.writeHead(answer.statusCode ?? 500, { "content-type": "application/json" });
              res.end(Buffer.concat(body));
            });
          },
        );
        upstream.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
      const group = nextGroup();
      const a = make(new EtcdClient({ endpoints: [url, etcd.endpoints[0]!], requestTimeoutMs: 1000 }), "gw-a", group);
      a.member.start();
      await until("a active", () => a.member.phase === "active");
      expect(await a.member.commitGrant("valve-1", 1)).toEqual({ ok: true });
      armed = true; // token 1 exists: the next commit is a single transaction that applies
      expect(await a.member.commitGrant("valve-1", 2)).toEqual({ ok: true });
      expect(swallowed).toBe(1);
      expect(await a.member.readToken("valve-1")).toBe(2);
      expect(a.member.phase).toBe("active");
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it("a standby commits nothing", async () => {
    const group = nextGroup();
    const a = make(client(), "gw-a", group);
    a.member.start();
    await until("a active", () => a.member.phase === "active");
    const b = make(client(), "gw-b", group);
    b.member.start();
    await until("b standby", () => b.member.phase === "standby");
    expect(await b.member.commitGrant("valve-1", 100)).toMatchObject({ ok: false, stale: false });
    expect(await b.member.readToken("valve-1")).toBe(0);
  });
});

describe("group member with etcd over TLS, client certificates and a password", () => {
  let etcd: EtcdCluster;
  let dir: string;
  let pki: ReturnType<typeof makePki>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "fencegate-etcd-pki-"));
    pki = makePki(dir);
    etcd = await startEtcd({
      tls: { caFile: pki.caFile, certFile: pki.peer.certFile, keyFile: pki.peer.keyFile, client: pki.anonymousClient },
      rootPassword: "s3cret",
      electionTimeoutMs: 100,
    });
  });
  afterAll(async () => {
    await etcd?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const groupConfig = (password: string) =>
    parseConfig({
      ...DOCTOR_BASE,
      group: {
        name: "tls",
        endpoints: etcd.endpoints,
        tls: { caFile: pki.caFile, ...pki.anonymousClient },
        username: "root",
        password,
        leaseTtlMs: 3000,
        selfFenceMarginMs: 500,
        requestTimeoutMs: 500,
        etcdElectionTimeoutMs: etcd.electionTimeoutMs,
      },
    }).group!;

  it("campaigns and commits tokens as a user, over TLS with a client certificate", async () => {
    const p = member(etcdClientFor(groupConfig("s3cret")), "gw-a", "tls");
    try {
      p.member.start();
      await until("active", () => p.member.phase === "active");
      expect(await p.member.commitGrant("valve-1", 1)).toEqual({ ok: true });
      expect(await p.member.readToken("valve-1")).toBe(1);
    } finally {
      await p.member.stop();
      p.client.close();
    }
  });

  it("says so when etcd refuses the password", async () => {
    const c = etcdClientFor(groupConfig("wrong"));
    try {
      await expect(c.grantLease(3)).rejects.toThrow(
        /etcd refused user root: etcdserver: authentication failed, invalid user ID or password/,
      );
    } finally {
      c.close();
    }
  });

  it("says so when the client certificate has a Common Name, which etcd's JSON gateway refuses with authentication on", async () => {
    const c = new EtcdClient({
      endpoints: etcd.endpoints,
      requestTimeoutMs: 1000,
      username: "root",
      password: "s3cret",
      tls: { ca: readFileSync(pki.caFile), cert: readFileSync(pki.client("gw-a").certFile), key: readFileSync(pki.client("gw-a").keyFile) },
    });
    try {
      await expect(c.grantLease(3)).rejects.toThrow(/CommonName of client sending a request against gateway will be ignored/);
    } finally {
      c.close();
    }
  });

  it("refuses a server whose certificate the CA did not sign", async () => {
    const c = new EtcdClient({ endpoints: etcd.endpoints, requestTimeoutMs: 1000, tls: { ca: readFileSync(pki.stranger.certFile) } });
    try {
      await expect(c.grantLease(3)).rejects.toThrow(/no etcd endpoint answered/);
    } finally {
      c.close();
    }
  });
});

describe("group member on a 3-member etcd", () => {
  let etcd: EtcdCluster;
  beforeAll(async () => {
    // An election timeout the member's settings ride out (TTL 3 s, margin 0.5 s, requests 0.6 s;
    // src/config/schema.ts): killing the etcd leader moves leadership without a step-down.
    etcd = await startEtcd({ members: 3, electionTimeoutMs: 300 });
  });
  afterAll(async () => {
    await etcd?.stop();
  });

  it("keeps leading and committing with the etcd follower its client uses killed; with the quorum lost it commits nothing and stops driving devices before its lease can expire", async () => {
    // The member killed first is a follower: killing etcd's leader would add an election
    // (a randomized 1-2 s election timeout, more under load) during which no write commits.
    const raftLeader = await etcd.waitForLeader(10_000);
    const [follower, other] = [0, 1, 2].filter((i) => i !== raftLeader) as [number, number];
    // The follower's endpoint first: the client is talking to it when it dies.
    const endpoints = [follower, other, raftLeader].map((i) => etcd.endpoints[i]!);
    const p = member(new EtcdClient({ endpoints, requestTimeoutMs: 600 }), "gw-a", "three", 3000, 500);
    try {
      p.member.start();
      await until("active", () => p.member.phase === "active");
      expect(await p.member.commitGrant("valve-1", 1)).toEqual({ ok: true });

      await etcd.kill(follower);
      await sleep(1500); // renewals across the loss: the client moves to the other members
      expect(p.member.phase).toBe("active");
      expect(await p.member.commitGrant("valve-1", 2)).toEqual({ ok: true });

      await etcd.kill(other); // one of three left: no quorum
      const lostAt = performance.now();
      // Whether the member may drive devices is read from its clock whenever asked: sampling
      // it late (a loaded machine) can only see the window closed earlier, never later.
      let lastMayDriveAt = lostAt;
      const sampler = setInterval(() => {
        if (p.member.mayDriveDevices()) lastMayDriveAt = performance.now();
      }, 5);
      const commit = await p.member.commitGrant("valve-1", 3);
      expect(commit).toMatchObject({ ok: false, stale: false });
      await until("stepped down", () => p.deactivations.length > 0, 8000);
      clearInterval(sampler);
      expect(p.deactivations[0]!.reason).toBe("renewal-overdue");
      // The window closes TTL - margin after the last confirmed renewal was sent. etcd's leader
      // renews leases without a round of consensus, and keeps doing so until it notices its
      // quorum is gone (about an election timeout, 0.3 s; 1.5 s allowed).
      expect(lastMayDriveAt - lostAt).toBeLessThanOrEqual(3000 - 500 + 1500);
      expect(p.member.mayDriveDevices()).toBe(false);

      await etcd.restart(other); // quorum back: it campaigns again and leads
      await until("active again", () => p.member.phase === "active", 15_000);
      // The commit of 3 timed out, its outcome unknown: etcd may still apply it once its quorum
      // is back. Either way token 3 was never handed out (the grant was refused), and the next
      // grant must be above whatever etcd holds.
      expect([2, 3]).toContain(await p.member.readToken("valve-1"));
    } finally {
      await p.member.stop();
      p.client.close();
    }
  });
});
