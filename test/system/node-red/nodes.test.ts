/**
 * The Node-RED nodes in the real Node-RED runtime (node-red-node-test-helper; Node-RED 4.1
 * on Node 20, 5.x on Node 24: test/support/node-red.ts), loaded from the package as packed
 * and installed into a Node-RED user directory, against the real daemon, Mosquitto and the
 * simulated fenced valves. Statuses are observed as the editor gets them (the runtime's
 * node-status events), errors in Node-RED's log, outputs with the helper's nodes (or, in
 * the example flow, its debug nodes).
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { brokerAddress } from "fencegate-client";
import mqtt from "mqtt";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { TestController, type Json } from "../../support/controller.ts";
import { installNodeRedPackage, nodeRedRuntime, type InstalledPackage } from "../../support/node-red.ts";
import { startTcpProxy, type TcpProxy } from "../../support/proxy.ts";
import { DaemonProcess, valve } from "../../support/daemon.ts";
import { startStack, stopDaemon, Teardown, type Stack } from "../../support/stack.ts";
import { freePort } from "../../support/ports.ts";
import { runToolOrThrow } from "../../support/processes.ts";
import { makePki, type Pki } from "../broker-security/pki.ts";
import { until } from "../../support/watch.ts";

type Msg = Record<string, any>;
interface NodeTestHelper {
  init(runtimePath: string): void;
  log(): { getCalls(): { args: [{ level: number; type?: string; msg?: unknown }] }[]; ERROR: number };
  load(nodes: unknown[], flow: Json[], credentials?: Json): Promise<void>;
  setFlows(flow: Json[], type: "full" | "nodes" | "flows", credentials?: Json): Promise<void>;
  unload(): Promise<void>;
  getNode(id: string): { on(event: "input", listener: (msg: Msg) => void): void; receive(msg: Msg): void } | null;
}

const helper = createRequire(import.meta.url)("node-red-node-test-helper") as NodeTestHelper;
const runtime = nodeRedRuntime();
helper.init(runtime.main);
const CORE_NODES = [
  "common/20-inject.js",
  "common/21-debug.js",
  "common/90-comment.js",
  "network/05-tls.js",
  "function/10-function.js",
].map((f) => runtime.coreNodes(f));
/** Every status a node showed, in order, as the runtime hands them to the editor. */
const statusLog: { id: string; status: { fill?: string; shape?: string; text: string } }[] = [];
(createRequire(runtime.main)(runtime.main) as { runtime: { events: NodeJS.EventEmitter } }).runtime.events.on(
  "node-status",
  (e: (typeof statusLog)[number]) => statusLog.push(e),
);

const teardown = new Teardown();
let stack: Stack;
let installed: InstalledPackage;
let ctl: TestController;
let primaryLink: TcpProxy;
/** The broker's second listener: TLS with client certificates, and a password for user plc-a. */
let tlsUrl: string;
let pki: Pki;
const PLC_A_PASSWORD = "a-secret";
/** Every command request that reached the broker, by actuator: what a node sent, not what it meant to. */
const commandsOnTheWire: { actuator: string; body: Json }[] = [];

beforeAll(async () => {
  // Mosquitto started as root reads these as the mosquitto user.
  const pkiDir = teardown.add(mkdtempSync(join(tmpdir(), "fencegate-node-red-pki-")), (d) => rmSync(d, { recursive: true, force: true }));
  chmodSync(pkiDir, 0o755);
  pki = makePki(pkiDir);
  const passwordFile = join(pkiDir, "passwd");
  runToolOrThrow("mosquitto_passwd", ["-b", "-c", passwordFile, "plc-a", PLC_A_PASSWORD]);
  chmodSync(passwordFile, 0o644);
  stack = await startStack(teardown, {
    name: "node-red",
    // Anonymous stays allowed for the daemon on the plain listener; a client that names a user must have its password.
    brokerConfig: (tlsPort) =>
      [
        `password_file ${passwordFile}`,
        `listener ${tlsPort} 127.0.0.1`,
        `cafile ${pki.caFile}`,
        `certfile ${pki.server.certFile}`,
        `keyfile ${pki.server.keyFile}`,
        "require_certificate true",
      ].join("\n"),
    sim: () => ({ units: [1, 2, 3, 4], rate: 0 }),
    gateway: (sim) => ({
      buses: { sim: { type: "tcp", ...sim, timeoutMs: 1000 } },
      actuators: [valve("valve-1", "sim", 1), valve("valve-2", "sim", 2), valve("valve-3", "sim", 3), valve("valve-4", "sim", 4)],
    }),
    fenced: ["valve-1", "valve-2", "valve-3", "valve-4"],
  });
  tlsUrl = `mqtts://127.0.0.1:${stack.broker.extraPort}`;
  installed = await installNodeRedPackage(stack.dir);
  ctl = teardown.add(await TestController.connect(stack.broker.url, "line-x"), (c) => c.close());
  primaryLink = teardown.add(await startTcpProxy({ host: "127.0.0.1", port: stack.broker.port }), (p) => p.close());
  const spy = teardown.add(
    await mqtt.connectAsync({ ...brokerAddress(stack.broker.url), protocolVersion: 5, clientId: "node-red-test-spy" }),
    (c) => c.endAsync(true),
  );
  spy.on("message", (topic, payload) =>
    commandsOnTheWire.push({ actuator: topic.split("/")[1]!, body: JSON.parse(payload.toString()) as Json }),
  );
  await spy.subscribeAsync("fencegate/+/command", { qos: 1 });
}, 300_000);

afterEach(async () => {
  primaryLink?.resume();
  // Removing every node releases the leases it held, so the next test starts from free valves.
  await helper.setFlows([], "full").catch(() => {});
  await helper.unload();
  statusLog.length = 0;
});

afterAll(() => teardown.run());

// ---------------------------------------------------------------------------------------
// Flows for the tests

const TAB = "tests-tab";

function brokerNode(id: string, holder: string, url = stack.broker.url): Json {
  return { id, type: "fencegate-broker", name: holder, url, usetls: false, tls: "", baseTopic: "fencegate", holder, protocolVersion: "5" };
}

/** A tab with `nodes` and `brokers`, and a helper node for each id in `outputs`. */
function testFlow(brokers: Json[], nodes: Json[], outputs: string[] = []): Json[] {
  return [
    { id: TAB, type: "tab", label: "fencegate tests" },
    ...brokers,
    ...nodes.map((n) => ({ z: TAB, ...n })),
    ...outputs.map((id) => ({ id, type: "helper", z: TAB })),
  ];
}

/** What reached each of `ids` (helper or debug nodes), in order. */
function record(ids: string[]): Record<string, Msg[]> {
  const seen: Record<string, Msg[]> = {};
  for (const id of ids) {
    const got: Msg[] = (seen[id] = []);
    const node = helper.getNode(id);
    if (!node) throw new Error(`no node ${id} in the flow`);
    node.on("input", (msg) => got.push(msg));
  }
  return seen;
}

async function load(flow: Json[], observe: string[] = []): Promise<Record<string, Msg[]>> {
  await helper.load([installed.nodes, ...CORE_NODES], flow);
  return record(observe);
}

/** The statuses node `id` showed, oldest first. */
function statusesOf(id: string): { fill?: string; shape?: string; text: string }[] {
  return statusLog.filter((e) => e.id === id).map((e) => e.status);
}

function statusOf(id: string) {
  return statusesOf(id).at(-1);
}

/** Waits until node `id` shows a status whose text matches `text`; returns it. */
async function statusMatching(id: string, text: RegExp, timeoutMs = 10_000) {
  return until(() => statusesOf(id).find((s) => text.test(s.text)), { timeoutMs, everyMs: 10 }).catch(() => {
    throw new Error(`node ${id} did not show ${text}; it showed ${JSON.stringify(statusesOf(id).map((s) => s.text))}`);
  });
}

/** Waits for the `n`th message (1-based) to reach `id`. */
async function nth(seen: Record<string, Msg[]>, id: string, n = 1, timeoutMs = 10_000): Promise<Msg> {
  return until(() => seen[id]!.length >= n && seen[id]![n - 1], { timeoutMs, everyMs: 10 }).catch(() => {
    throw new Error(`message ${n} did not reach ${id}; it got ${JSON.stringify(seen[id]!.map((m) => m.payload))}`);
  });
}

/** What the nodes logged as errors (node.error, a failed done), as "type: message". */
function errorsLogged(): string[] {
  const log = helper.log();
  return log
    .getCalls()
    .map((c) => c.args[0])
    .filter((e) => e.level === log.ERROR)
    .map((e) => `${e.type}: ${String(e.msg)}`);
}

async function leaseOf(actuator: string): Promise<Json | null> {
  const reply = await ctl.read(actuator);
  return reply.state.lease;
}

// ---------------------------------------------------------------------------------------

describe("the node package in Node-RED", () => {
  it(`loads its four node types into Node-RED ${runtime.version}, and a flow of each starts without an error`, async () => {
    await load(
      testFlow(
        [brokerNode("b", "nr-load")],
        [
          { id: "lease", type: "fencegate-lease", broker: "b", actuator: "valve-4", ttlMs: 1000, acquireOnStart: false, wires: [[]] },
          { id: "command", type: "fencegate-command", broker: "b", actuator: "valve-4", deadlineMs: "", wires: [[], []] },
          { id: "state", type: "fencegate-state", broker: "b", actuator: "valve-4", wires: [[], []] },
        ],
      ),
    );
    for (const id of ["b", "lease", "command", "state"]) expect(helper.getNode(id), id).not.toBeNull();
    await statusMatching("state", /^online/);
    expect(statusOf("lease")).toMatchObject({ fill: "grey", text: "not held" });
    expect(errorsLogged()).toEqual([]);
  });
});

describe("fencegate-broker, the configuration node", () => {
  const overTls = (password: string) => {
    const flow = testFlow(
      [
        {
          id: "tls",
          type: "tls-config",
          name: "",
          cert: pki.client("plc-a").certFile,
          key: pki.client("plc-a").keyFile,
          ca: pki.caFile,
          certname: "",
          keyname: "",
          caname: "",
          servername: "",
          verifyservercert: true,
          alpnprotocol: "",
        },
        { ...brokerNode("b", "plc-a", tlsUrl), usetls: true, tls: "tls" },
      ],
      [
        {
          id: "lease",
          type: "fencegate-lease",
          broker: "b",
          actuator: "valve-4",
          ttlMs: 1000,
          acquireOnStart: true,
          wires: [["lease-out"]],
        },
      ],
      ["lease-out"],
    );
    return { flow, credentials: { b: { username: "plc-a", password } } };
  };

  it("connects over mqtts with Node-RED's TLS configuration and the user and password from the credentials store", async () => {
    const { flow, credentials } = overTls(PLC_A_PASSWORD);
    await helper.load([installed.nodes, ...CORE_NODES], flow, credentials);
    const seen = record(["lease-out"]);
    expect((await nth(seen, "lease-out")).payload).toMatchObject({ state: "held", holder: "plc-a" });
    expect(await leaseOf("valve-4")).toMatchObject({ holder: "plc-a" });
  });

  it("says the broker refused the password, and keeps trying", async () => {
    const { flow, credentials } = overTls("wrong");
    await helper.load([installed.nodes, ...CORE_NODES], flow, credentials);
    const status = await statusMatching("lease", /refused the user name or password/);
    expect(status).toMatchObject({ fill: "yellow", shape: "ring" });
    expect(await leaseOf("valve-4")).toBeNull();
  });

  it("with no broker at the URL, its nodes say so and keep trying", async () => {
    const nobody = `mqtt://127.0.0.1:${await freePort()}`;
    await load(
      testFlow(
        [brokerNode("b", "nr-no-broker", nobody)],
        [{ id: "state", type: "fencegate-state", broker: "b", actuator: "valve-4", wires: [[], []] }],
      ),
    );
    expect(await statusMatching("state", /^cannot reach the broker/)).toEqual({
      fill: "yellow",
      shape: "ring",
      text: "cannot reach the broker: connection refused",
    });
    const warned = helper
      .log()
      .getCalls()
      .map((c) => c.args[0])
      .find((e) => String(e.msg).startsWith("fencegate: cannot reach"));
    expect(warned?.msg).toBe(`fencegate: cannot reach the broker: connection refused (${nobody}, holder nr-no-broker); trying again`);
  });

  it("with no holder named, each node acts as one derived from its host and flow", async () => {
    const flow = testFlow(
      [{ ...brokerNode("b", ""), holder: "" }],
      [
        {
          id: "lease",
          type: "fencegate-lease",
          broker: "b",
          actuator: "valve-4",
          ttlMs: 1000,
          acquireOnStart: true,
          wires: [["lease-out"]],
        },
      ],
      ["lease-out"],
    );
    flow[0]!.label = "Pump house (valve 4)";
    const seen = await load(flow, ["lease-out"]);
    const holder = `${hostname().replace(/[^A-Za-z0-9._:-]+/g, "-")}.Pump-house-valve-4`;
    expect((await nth(seen, "lease-out")).payload).toMatchObject({ state: "held", holder });
    expect(await leaseOf("valve-4")).toMatchObject({ holder });
  });

  it("a lease node with a TTL that is not a whole number of milliseconds says so and acquires nothing", async () => {
    await load(
      testFlow(
        [brokerNode("b", "nr-bad-ttl")],
        [{ id: "lease", type: "fencegate-lease", broker: "b", actuator: "valve-4", ttlMs: "5 s", acquireOnStart: true, wires: [[]] }],
      ),
    );
    expect(statusOf("lease")).toMatchObject({ fill: "red", text: "bad TTL" });
    expect(errorsLogged()).toEqual([
      'fencegate-lease: fencegate: TTL must be a whole number of milliseconds from 1 to 3600000; it is "5 s".',
    ]);
  });

  it.each([
    ["a URL that is not one", { url: "localhost:1883" }, 'broker URL "localhost:1883" must start with mqtt://, mqtts://, ws:// or wss://'],
    [
      "TLS with an mqtt:// URL",
      { usetls: true, tls: "tls" },
      "TLS is set, so the broker URL must start with mqtts:// or wss://, not mqtt://",
    ],
    ["a holder the contract does not allow", { holder: "line a" }, 'holder "line a" may have only A-Z, a-z, 0-9, . _ : - (at most 128)'],
  ])("stops its nodes with a sentence on %s", async (_what, change, says) => {
    const flow = testFlow(
      [
        { id: "tls", type: "tls-config", name: "", cert: "", key: "", ca: pki.caFile, verifyservercert: true },
        { ...brokerNode("b", "nr-bad-config"), ...change },
      ],
      [{ id: "lease", type: "fencegate-lease", broker: "b", actuator: "valve-4", ttlMs: 1000, acquireOnStart: true, wires: [[]] }],
    );
    await load(flow);
    expect(statusOf("lease")).toMatchObject({ fill: "red", shape: "ring" });
    expect(errorsLogged()).toEqual([`fencegate-lease: fencegate: ${says}`]);
    expect(await leaseOf("valve-4")).toBeNull();
  });
});

describe("fencegate lease", () => {
  const leaseFlow = (holder: string, extra: Json = {}, url?: string) =>
    testFlow(
      [brokerNode("b", holder, url)],
      [
        {
          id: "lease",
          type: "fencegate-lease",
          broker: "b",
          actuator: "valve-2",
          ttlMs: 1000,
          acquireOnStart: true,
          wires: [["lease-out"]],
          ...extra,
        },
      ],
      ["lease-out"],
    );

  it("acquires when deployed: a green dot 'held, token N' and a held message", async () => {
    const seen = await load(leaseFlow("nr-holder"), ["lease-out"]);
    const held = await nth(seen, "lease-out");
    expect(held).toMatchObject({
      topic: "valve-2",
      payload: { state: "held", actuator: "valve-2", holder: "nr-holder", token: expect.any(Number) },
    });
    expect(statusOf("lease")).toMatchObject({ fill: "green", shape: "dot", text: `held, token ${held.payload.token}` });
    expect(await leaseOf("valve-2")).toMatchObject({ holder: "nr-holder", token: held.payload.token });
  });

  it("stands by while another holder has the lease, says who, and takes over the moment it is released", async () => {
    const other = await ctl.acquire("valve-2", 10_000);
    const seen = await load(leaseFlow("nr-standby"), ["lease-out"]);
    expect((await nth(seen, "lease-out")).payload).toMatchObject({
      state: "standby",
      heldBy: { holder: "line-x", token: other.lease.token },
    });
    expect(statusOf("lease")).toMatchObject({ fill: "yellow", shape: "dot", text: "standing by: held by line-x" });
    const releasedAt = performance.now();
    await ctl.request("valve-2", "lease/release", { holder: "line-x", token: other.lease.token });
    const held = await nth(seen, "lease-out", 2);
    // From the retained state, not the 5 s retry that is only a net.
    expect(performance.now() - releasedAt).toBeLessThan(2000);
    expect(held.payload).toMatchObject({ state: "held", token: other.lease.token + 1 });
  });

  it("gives the lease back on a release message and takes it again on acquire, with a higher token", async () => {
    const seen = await load(leaseFlow("nr-messages", { acquireOnStart: false }), ["lease-out"]);
    expect(await leaseOf("valve-2")).toBeNull();
    helper.getNode("lease")!.receive({ payload: "acquire" });
    const first = (await nth(seen, "lease-out")).payload;
    expect(first).toMatchObject({ state: "held" });
    helper.getNode("lease")!.receive({ payload: "release" });
    expect((await nth(seen, "lease-out", 2)).payload).toMatchObject({ state: "released", token: first.token });
    expect(await leaseOf("valve-2")).toBeNull();
    expect(statusOf("lease")).toMatchObject({ fill: "grey", text: "not held" });
    helper.getNode("lease")!.receive({ payload: "acquire" });
    expect((await nth(seen, "lease-out", 3)).payload).toMatchObject({ state: "held", token: first.token + 1 });
  });

  it("says what is wrong with a message that is neither acquire nor release, and carries on", async () => {
    const seen = await load(leaseFlow("nr-bad-message"), ["lease-out"]);
    await nth(seen, "lease-out");
    helper.getNode("lease")!.receive({ payload: { take: true } });
    const error = await until(() => errorsLogged()[0], { what: "the error in the log" });
    expect(error).toBe('fencegate-lease: fencegate lease: msg.payload must be "acquire" or "release"; it is {"take":true}.');
    expect(await leaseOf("valve-2")).toMatchObject({ holder: "nr-bad-message" });
  });

  it("shows 'lost: LEASE_EXPIRED' the moment its lease expires unrenewed (its link held past the TTL)", async () => {
    const seen = await load(leaseFlow("nr-frozen", { ttlMs: 600 }, primaryLink.url), ["lease-out"]);
    const held = (await nth(seen, "lease-out")).payload;
    const heldAt = performance.now();
    primaryLink.hold();
    const lost = (await nth(seen, "lease-out", 2)).payload;
    expect(performance.now() - heldAt).toBeLessThan(600 + 1000);
    expect(lost).toMatchObject({ state: "lost", token: held.token, code: "LEASE_EXPIRED" });
    expect(statusOf("lease")).toMatchObject({ fill: "red", shape: "dot", text: "lost: LEASE_EXPIRED" });
  });

  it("keeps the lease and its token across a full redeploy (a restarted node gets its live lease back)", async () => {
    const flow = leaseFlow("nr-redeploy", { ttlMs: 3000 });
    const seen = await load(flow, ["lease-out"]);
    const token = (await nth(seen, "lease-out")).payload.token;
    await helper.setFlows(flow, "full");
    const again = record(["lease-out"]);
    expect((await nth(again, "lease-out")).payload).toMatchObject({ state: "held", token });
    expect(await leaseOf("valve-2")).toMatchObject({ holder: "nr-redeploy", token });
  });

  it("refuses a second lease node for the same actuator and holder, and the first keeps the lease", async () => {
    const seen = await load(
      testFlow(
        [brokerNode("b", "nr-twice")],
        [
          {
            id: "lease",
            type: "fencegate-lease",
            broker: "b",
            actuator: "valve-2",
            ttlMs: 1000,
            acquireOnStart: true,
            wires: [["lease-out"]],
          },
          { id: "lease-2", type: "fencegate-lease", broker: "b", actuator: "valve-2", ttlMs: 1000, acquireOnStart: true, wires: [[]] },
        ],
        ["lease-out"],
      ),
      ["lease-out"],
    );
    // Node-RED starts the nodes in flow order: the second one is refused.
    const token = (await nth(seen, "lease-out")).payload.token;
    await statusMatching("lease-2", /^another lease node has this actuator$/);
    expect(statusOf("lease-2")).toMatchObject({ fill: "red", shape: "ring" });
    expect(await leaseOf("valve-2")).toMatchObject({ holder: "nr-twice", token });
  });
});

describe("fencegate command", () => {
  /** A lease node and a command node on valve-3 for one holder; the command's outputs go to applied and refused. */
  const commandFlow = (holder: string, lease: Json | null = {}) =>
    testFlow(
      [brokerNode("b", holder)],
      [
        ...(lease
          ? [
              {
                id: "lease",
                type: "fencegate-lease",
                broker: "b",
                actuator: "valve-3",
                ttlMs: 2000,
                acquireOnStart: true,
                wires: [["lease-out"]],
                ...lease,
              },
            ]
          : []),
        { id: "command", type: "fencegate-command", broker: "b", actuator: "valve-3", deadlineMs: "", wires: [["applied"], ["refused"]] },
      ],
      ["lease-out", "applied", "refused"],
    );

  async function loadHeld(holder: string) {
    const seen = await load(commandFlow(holder), ["lease-out", "applied", "refused"]);
    const token = (await nth(seen, "lease-out")).payload.token as number;
    return { seen, token };
  }

  const sentBy = (holder: string) => commandsOnTheWire.filter((c) => c.body.holder === holder);

  it("sends setpoints under the lease: output 1 with the values the device confirmed, token and seq", async () => {
    const { seen, token } = await loadHeld("nr-cmd-applied");
    helper.getNode("command")!.receive({ payload: { position: 42.5 }, topic: "kept" });
    const applied = await nth(seen, "applied");
    expect(applied).toMatchObject({
      topic: "kept",
      payload: { outcome: "applied", actuator: "valve-3", holder: "nr-cmd-applied", token, seq: 0, applied: { position: 42.5 } },
    });
    expect(stack.sim.device(3).targetPosition).toBe(42.5);
    helper.getNode("command")!.receive({ payload: { position: 43 } });
    expect((await nth(seen, "applied", 2)).payload).toMatchObject({ token, seq: 1 });
    expect(statusOf("command")).toMatchObject({ fill: "green", text: `applied, token ${token} seq 1` });
    expect(seen.refused).toEqual([]);
  });

  it.each([
    ["a string", "42.5", 'it is a string ("42.5")'],
    ["a number", 42.5, "it is a number (42.5)"],
    ["an array", [42.5], "it is an array"],
    ["null", null, "it is null"],
    ["a string setpoint", { position: "42.5" }, 'Setpoint "position" must be a finite number; it is a string ("42.5").'],
    ["no setpoint", {}, "msg.payload has no setpoints"],
    ["a Buffer (an mqtt in node's payload)", Buffer.from('{"position":1}'), "it is a Buffer"],
    [
      "65 setpoints, one over the contract's limit",
      Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`p${i}`, i])),
      "msg.payload has 65 setpoints; a command carries at most 64.",
    ],
    [
      "setpoints that would not fit a 16 KiB request",
      { ["x".repeat(12_300)]: 1 },
      "msg.payload takes 12306 bytes as JSON; a command's setpoints may take at most 12288.",
    ],
  ])("refuses %s as msg.payload with INVALID_REQUEST on output 2, sending nothing", async (_what, payload, says) => {
    const { seen } = await loadHeld("nr-cmd-invalid");
    helper.getNode("command")!.receive({ payload });
    const refused = (await nth(seen, "refused")).payload;
    expect(refused).toMatchObject({ outcome: "refused", code: "INVALID_REQUEST", sent: false, actuator: "valve-3" });
    expect(refused.message).toContain(says);
    expect(statusOf("command")).toMatchObject({ fill: "red", text: "refused: INVALID_REQUEST" });
    expect(sentBy("nr-cmd-invalid")).toEqual([]);
    expect(errorsLogged()).toEqual([]);
  });

  it.each([
    ["UNKNOWN_POINT", { flow: 1 }],
    ["READ_ONLY_POINT", { actual: 1 }],
    ["OUT_OF_RANGE", { position: 101 }],
  ])("routes the gateway's %s to output 2, and the lease is kept", async (code, set) => {
    const { seen, token } = await loadHeld(`nr-cmd-${code.toLowerCase().replace(/_/g, "-")}`);
    helper.getNode("command")!.receive({ payload: set });
    const refused = (await nth(seen, "refused")).payload;
    expect(refused).toMatchObject({ outcome: "refused", code, sent: true, set });
    expect(refused.message).not.toMatch(/^[A-Z_]+:/);
    helper.getNode("command")!.receive({ payload: { position: 7 } });
    expect((await nth(seen, "applied")).payload).toMatchObject({ token, applied: { position: 7 } });
    expect(errorsLogged()).toEqual([]);
  });

  it("takes setpoints built in a function node (objects of another JavaScript context)", async () => {
    const flow = commandFlow("nr-cmd-function");
    flow.push({
      id: "build",
      type: "function",
      z: TAB,
      name: "",
      func: "msg.payload = { position: msg.payload };\nreturn msg;",
      outputs: 1,
      noerr: 0,
      initialize: "",
      finalize: "",
      libs: [],
      wires: [["command"]],
    });
    const seen = await load(flow, ["lease-out", "applied", "refused"]);
    const token = (await nth(seen, "lease-out")).payload.token as number;
    helper.getNode("build")!.receive({ payload: 17.5 });
    expect((await nth(seen, "applied")).payload).toMatchObject({ outcome: "applied", token, applied: { position: 17.5 } });
    expect(stack.sim.device(3).targetPosition).toBe(17.5);
    expect(seen.refused).toEqual([]);
  });

  it("takes 64 setpoints (the contract's limit) to the gateway, which names the first it does not know", async () => {
    const { seen } = await loadHeld("nr-cmd-64");
    helper.getNode("command")!.receive({ payload: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`p${i}`, i])) });
    expect((await nth(seen, "refused")).payload).toMatchObject({ code: "UNKNOWN_POINT", sent: true });
    expect(sentBy("nr-cmd-64")).toHaveLength(1);
  });

  it("refuses locally with NO_LEASE while the lease node does not hold the lease, and sends nothing", async () => {
    const seen = await load(commandFlow("nr-cmd-unheld", { acquireOnStart: false }), ["lease-out", "applied", "refused"]);
    await statusMatching("lease", /^not held$/);
    helper.getNode("command")!.receive({ payload: { position: 12 } });
    const refused = (await nth(seen, "refused")).payload;
    expect(refused).toMatchObject({ outcome: "refused", code: "NO_LEASE", sent: false });
    expect(refused.message).toBe(
      'No lease on valve-3 (holder nr-cmd-unheld): the lease node does not hold it (send it "acquire"). Nothing was sent.',
    );
    expect(statusOf("command")).toMatchObject({ fill: "red", text: "refused: no lease held, nothing sent" });
    expect(sentBy("nr-cmd-unheld")).toEqual([]);
  });

  it("refuses locally with NO_LEASE while standing by, naming the holder", async () => {
    const other = await ctl.acquire("valve-3", 10_000);
    try {
      const seen = await load(commandFlow("nr-cmd-standby"), ["lease-out", "applied", "refused"]);
      await nth(seen, "lease-out");
      helper.getNode("command")!.receive({ payload: { position: 12 } });
      const refused = (await nth(seen, "refused")).payload;
      expect(refused).toMatchObject({ code: "NO_LEASE", sent: false });
      expect(refused.message).toBe(
        `No lease on valve-3 (holder nr-cmd-standby): standing by, held by line-x (token ${other.lease.token}). Nothing was sent.`,
      );
      expect(sentBy("nr-cmd-standby")).toEqual([]);
    } finally {
      await ctl.request("valve-3", "lease/release", { holder: "line-x", token: other.lease.token });
    }
  });

  it("refuses with NO_LEASE when no lease node keeps the actuator for its holder", async () => {
    const seen = await load(commandFlow("nr-cmd-alone", null), ["applied", "refused"]);
    helper.getNode("command")!.receive({ payload: { position: 12 } });
    expect((await nth(seen, "refused")).payload).toMatchObject({
      code: "NO_LEASE",
      sent: false,
      message:
        "No fencegate lease node keeps valve-3 for holder nr-cmd-alone: add one with the same broker and actuator. Nothing was sent.",
    });
  });

  it("on OUTCOME_UNKNOWN re-reads the state, puts it in the refusal and says so", async () => {
    const { seen, token } = await loadHeld("nr-cmd-unknown");
    stack.sim.answerException(4, 1, 3, 16); // server device failure to the command block: maybe applied
    helper.getNode("command")!.receive({ payload: { position: 33 } });
    const refused = (await nth(seen, "refused")).payload;
    expect(refused).toMatchObject({
      outcome: "unknown",
      code: "OUTCOME_UNKNOWN",
      sent: true,
      modbusCode: 4,
      fence: { token, seq: 0 },
      state: { actuator: "valve-3", fence: { token, seq: 0 } },
    });
    expect(refused.message).toContain("The device may have applied it; the state was re-read.");
    expect(statusOf("command")).toMatchObject({ fill: "yellow", text: "outcome unknown (OUTCOME_UNKNOWN): state re-read" });
    helper.getNode("command")!.receive({ payload: { position: 34 } });
    expect((await nth(seen, "applied")).payload).toMatchObject({ token, seq: 1, applied: { position: 34 } });
  });
});

describe("with the gateway gone", () => {
  it("the command node no longer shows its last 'applied' but the actuator offline, and the lease node says no gateway answers", async () => {
    const flow = testFlow(
      [brokerNode("b", "nr-gateway-gone")],
      [
        {
          id: "lease",
          type: "fencegate-lease",
          broker: "b",
          actuator: "valve-3",
          ttlMs: 1000,
          acquireOnStart: true,
          wires: [["lease-out"]],
        },
        { id: "command", type: "fencegate-command", broker: "b", actuator: "valve-3", deadlineMs: "", wires: [["applied"], ["refused"]] },
      ],
      ["lease-out", "applied", "refused"],
    );
    const seen = await load(flow, ["lease-out", "applied", "refused"]);
    await nth(seen, "lease-out");
    helper.getNode("command")!.receive({ payload: { position: 8 } });
    await nth(seen, "applied");
    expect(statusOf("command")).toMatchObject({ fill: "green", text: expect.stringMatching(/^applied, /) });

    await stack.daemon.kill("SIGKILL"); // its last will says the gateway is offline
    try {
      expect(await statusMatching("command", /^offline: /)).toEqual({
        fill: "red",
        shape: "ring",
        text: "offline: no gateway serves it now",
      });
      expect(await statusMatching("lease", /^waiting: /, 20_000)).toEqual({
        fill: "yellow",
        shape: "ring",
        text: "waiting: no gateway answers",
      });
      expect(statusOf("command")!.text).toBe("offline: no gateway serves it now");
    } finally {
      const daemon = teardown.add(DaemonProcess.start(stack.dir, stack.config), (d) => stopDaemon(d));
      await daemon.ready(["valve-1", "valve-2", "valve-3", "valve-4"]);
    }
  });
});

describe("fencegate state", () => {
  it("emits the retained state first, then states and events as a lease is taken and a command applied", async () => {
    const seen = await load(
      testFlow(
        [brokerNode("b", "nr-watcher")],
        [{ id: "state", type: "fencegate-state", broker: "b", actuator: "valve-4", wires: [["states"], ["events"]] }],
        ["states", "events"],
      ),
      ["states", "events"],
    );
    expect((await nth(seen, "states")).payload).toMatchObject({ actuator: "valve-4", online: true, lease: null });
    await statusMatching("state", /^online, no lease$/);
    const granted = await ctl.acquire("valve-4", 5000);
    await ctl.command("valve-4", granted.lease.token, 0, { position: 61 });
    const applied = await until(() => seen.events!.find((m) => m.payload.type === "applied"), { what: "the applied event" });
    expect(applied).toMatchObject({
      topic: "valve-4",
      payload: { type: "applied", holder: "line-x", token: granted.lease.token, seq: 0, applied: { position: 61 } },
    });
    expect(seen.events!.map((m) => m.payload.type)).toEqual(expect.arrayContaining(["granted", "accepted", "applied"]));
    await until(() => seen.states!.find((m) => m.payload.lease?.holder === "line-x"), { what: "a state with line-x's lease" });
    await statusMatching("state", new RegExp(`^online, held by line-x \\(token ${granted.lease.token}\\)$`));
    await ctl.request("valve-4", "lease/release", { holder: "line-x", token: granted.lease.token });
  });
});

describe("the example flow (examples/primary-and-standby.json)", () => {
  const PRIMARY = "fg0ta0b0a0000001";
  const OBSERVED = ["fg0adbglease001", "fg0adbgapplied1", "fg0adbgrefused1", "fg0bdbglease001", "fg0bdbgapplied1", "fg0bdbgrefused1"];

  /** The example as the import menu gives it, the brokers pointed at this test's (the primary's through `primaryUrl`). */
  function exampleFlow(primaryUrl = stack.broker.url, disabled: string[] = []): Json[] {
    const example = JSON.parse(readFileSync(join(installed.packageDir, "examples/primary-and-standby.json"), "utf8")) as Json[];
    return example.map((n) =>
      n.type === "fencegate-broker"
        ? { ...n, url: n.holder === "line-a" ? primaryUrl : stack.broker.url }
        : n.type === "tab"
          ? { ...n, disabled: disabled.includes(n.id) }
          : n,
    );
  }

  /** Presses an inject node's button. */
  const press = (id: string) => helper.getNode(id)!.receive({});

  it("loads whole: the primary holds valve-1, the standby stands by, nothing errs", async () => {
    const seen = await load(exampleFlow(), OBSERVED);
    const held = (await nth(seen, "fg0adbglease001")).payload;
    expect(held).toMatchObject({ state: "held", holder: "line-a", actuator: "valve-1" });
    await statusMatching("fg0alease0000001", new RegExp(`^held, token ${held.token}$`));
    expect((await nth(seen, "fg0bdbglease001")).payload).toMatchObject({
      state: "standby",
      holder: "line-b",
      heldBy: { holder: "line-a", token: held.token },
    });
    await statusMatching("fg0blease0000001", /^standing by: held by line-a$/);
    await statusMatching("fg0astate0000001", new RegExp(`^online, held by line-a \\(token ${held.token}\\)$`));
    expect(errorsLogged()).toEqual([]);
  });

  it("disabling the primary's flow hands valve-1 to the standby; enabled again, the primary stands by and its command is refused unsent", async () => {
    const seen = await load(exampleFlow(), OBSERVED);
    const primaryToken = (await nth(seen, "fg0adbglease001")).payload.token;
    await nth(seen, "fg0bdbglease001"); // standing by
    press("fg0ainject000001");
    expect((await nth(seen, "fg0adbgapplied1")).payload).toMatchObject({ outcome: "applied", holder: "line-a", applied: { position: 25 } });

    // As in the editor: the primary's tab disabled, deployed ("modified flows": the standby's keeps running).
    await helper.setFlows(exampleFlow(stack.broker.url, [PRIMARY]), "flows");
    const taken = (await nth(seen, "fg0bdbglease001", 2)).payload;
    expect(taken).toMatchObject({ state: "held", holder: "line-b", token: primaryToken + 1 });
    await statusMatching("fg0blease0000001", new RegExp(`^held, token ${taken.token}$`));
    press("fg0binject000001");
    expect((await nth(seen, "fg0bdbgapplied1")).payload).toMatchObject({
      outcome: "applied",
      holder: "line-b",
      token: taken.token,
      applied: { position: 60 },
    });

    await helper.setFlows(exampleFlow(), "flows");
    const primary = record(["fg0adbglease001", "fg0adbgapplied1", "fg0adbgrefused1"]);
    expect((await nth(primary, "fg0adbglease001")).payload).toMatchObject({
      state: "standby",
      heldBy: { holder: "line-b", token: taken.token },
    });
    const wireBefore = commandsOnTheWire.filter((c) => c.body.holder === "line-a").length;
    press("fg0ainject000001");
    const refused = (await nth(primary, "fg0adbgrefused1")).payload;
    expect(refused).toMatchObject({ outcome: "refused", code: "NO_LEASE", sent: false, holder: "line-a" });
    expect(refused.message).toBe(
      `No lease on valve-1 (holder line-a): standing by, held by line-b (token ${taken.token}). Nothing was sent.`,
    );
    expect(statusOf("fg0acommand0001")).toMatchObject({ fill: "red", text: "refused: no lease held, nothing sent" });
    expect(commandsOnTheWire.filter((c) => c.body.holder === "line-a").length).toBe(wireBefore);
    expect(stack.sim.device(1).targetPosition).toBe(60);
  });

  it("seed: the primary pauses past its lease with a command on its way, the standby acquires and commands, the primary's old command is refused STALE_TOKEN", async () => {
    const seen = await load(exampleFlow(primaryLink.url), OBSERVED);
    const primaryToken = (await nth(seen, "fg0adbglease001")).payload.token;
    await nth(seen, "fg0bdbglease001"); // standing by

    // The primary's Pi stalls: nothing it sends arrives, nothing reaches it. Its command
    // was already on its way, under the token it held.
    primaryLink.hold();
    press("fg0ainject000001");
    await until(() => primaryLink.connections.some((c) => c.upstream.includes('"position":25')), {
      what: "the primary's command to leave its Node-RED",
    });
    // Its lease runs out at the gateway; the standby takes it and commands.
    const taken = (await nth(seen, "fg0bdbglease001", 2, 15_000)).payload;
    expect(taken).toMatchObject({ state: "held", holder: "line-b", token: primaryToken + 1 });
    press("fg0binject000001");
    expect((await nth(seen, "fg0bdbgapplied1")).payload).toMatchObject({
      outcome: "applied",
      token: taken.token,
      applied: { position: 60 },
    });
    // By its own clock, the primary knew its lease was gone (it showed so while its link was held).
    expect(statusesOf("fg0alease0000001").map((s) => s.text)).toContain("lost: LEASE_EXPIRED");

    // The primary wakes: its old command reaches the gateway, which refuses it.
    primaryLink.resume();
    const refused = (await nth(seen, "fg0adbgrefused1")).payload;
    expect(refused).toMatchObject({
      outcome: "refused",
      code: "STALE_TOKEN",
      sent: true,
      holder: "line-a",
      fence: { token: taken.token, seq: 0 },
      lease: { holder: "line-b", token: taken.token },
      set: { position: 25 },
    });
    expect(statusOf("fg0acommand0001")).toMatchObject({ fill: "red", text: "refused: STALE_TOKEN" });
    expect(seen.fg0adbgapplied1).toEqual([]);
    expect(stack.sim.device(1).targetPosition).toBe(60);
    expect(errorsLogged()).toEqual([]);
  });
});
