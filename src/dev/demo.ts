/**
 * `fencegate demo`: replays the failure that leases alone cannot prevent, twice.
 *
 * Controller A holds the lease, then pauses (a GC pause, swap, a slow network) for longer
 * than its TTL. B takes over and moves the valve. A wakes up, still believing it holds the
 * lease, and sends its old command.
 *   1. With a lease but a plain write path (the controllers write the device directly),
 *      A's stale write lands and overwrites B's position.
 *   2. Through fencegate, A's command carries its old token and is refused.
 * Everything is real: an MQTT broker, the daemon, simulated actuators over Modbus TCP.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { FencegateClient, FencegateError } from "fencegate-client";
import ModbusSerial from "modbus-serial";
import { pino } from "pino";
import { PLAIN, positionToRaw } from "../../packages/protocol/src/modbus-profile.ts";
import { startSimulator, type SimulatorHandle } from "../../firmware-bridge/src/simulator.ts";
import { parseConfig } from "../config/parse.ts";
import { startDaemon, type Daemon } from "../daemon/index.ts";
import { embeddedBroker, type DevBroker } from "./broker.ts";

const TTL_MS = 400;
const PAUSE_MS = 900;
const A_POSITION = 90;
const B_POSITION = 20;

const HELP = `usage: fencegate demo [--broker URL]

Replays, twice, what happens when a controller pauses past its lease and a second one
takes over: once with direct device writes (the stale write wins), once through fencegate
(the stale write is refused). Starts everything it needs: an embedded MQTT broker (or
uses --broker, e.g. mqtt://127.0.0.1:1883), two simulated actuators and the daemon.`;

class Timeline {
  private readonly startMs = performance.now();
  line(actor: string, text: string): void {
    const t = ((performance.now() - this.startMs) / 1000).toFixed(3).padStart(7);
    console.log(`  ${t}s  ${actor.padEnd(10)} ${text}`);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pointsConfig(profile: "fenced" | "plain") {
  const fenced = profile === "fenced";
  return {
    position: { register: fenced ? 0x20 : PLAIN.TARGET_POSITION, type: "u16", scale: 0.01, min: 0, max: 100, writable: true },
    actual: { register: fenced ? 0x21 : PLAIN.ACTUAL_POSITION, scale: 0.01, min: 0, max: 100 },
  };
}

interface Setup {
  readonly broker: DevBroker;
  readonly plainSim: SimulatorHandle;
  readonly fencedSim: SimulatorHandle;
  readonly daemon: Daemon;
  readonly a: FencegateClient;
  readonly b: FencegateClient;
  readonly dir: string;
}

async function setUp(brokerUrl: string | undefined): Promise<Setup> {
  const broker: DevBroker = brokerUrl
    ? { url: brokerUrl, embedded: false, protocolVersion: 5, close: async () => {} }
    : await embeddedBroker();
  const plainSim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, profile: "plain", rate: 0 });
  const fencedSim = await startSimulator({ tcp: { host: "127.0.0.1", port: 0 }, profile: "fenced", rate: 0 });
  const dir = mkdtempSync(join(tmpdir(), "fencegate-demo-"));
  const baseTopic = `fencegate-demo-${process.pid}`;
  const config = parseConfig({
    gatewayId: "demo",
    mqtt: { url: broker.url, protocolVersion: broker.protocolVersion, baseTopic },
    buses: {
      plain: { type: "tcp", host: "127.0.0.1", port: plainSim.tcp!.port, timeoutMs: 500 },
      fenced: { type: "tcp", host: "127.0.0.1", port: fencedSim.tcp!.port, timeoutMs: 500 },
    },
    actuators: [
      { id: "valve-plain", bus: "plain", unit: 1, profile: "plain", pollIntervalMs: 200, points: pointsConfig("plain") },
      { id: "valve-fenced", bus: "fenced", unit: 1, profile: "fenced", pollIntervalMs: 200, points: pointsConfig("fenced") },
    ],
    leases: { minTtlMs: 100 },
    journal: { path: join(dir, "journal.db"), createIfMissing: true }, // the demo's own, thrown away
    metrics: { enabled: false },
  });
  const daemon = await startDaemon(config, pino({ level: "silent" }));
  const connect = (holder: string) =>
    FencegateClient.connect({ url: broker.url, holder, baseTopic, protocolVersion: broker.protocolVersion });
  const [a, b] = await Promise.all([connect("controller-A"), connect("controller-B")]);
  // Wait until the gateway reads both devices.
  for (const actuator of ["valve-plain", "valve-fenced"]) {
    for (let i = 0; ; i++) {
      const state = await a.read(actuator);
      if (state.online) break;
      if (i > 100) throw new Error(`${actuator} never came online`);
      await sleep(50);
    }
  }
  return { broker, plainSim, fencedSim, daemon, a, b, dir };
}

/** A Modbus master writing the plain device's setpoint register directly, as many gateways do. */
async function directWrite(port: number, position: number): Promise<void> {
  const client = new ModbusSerial.default();
  await client.connectTCP("127.0.0.1", { port });
  client.setID(1);
  await client.writeRegisters(PLAIN.TARGET_POSITION, [positionToRaw(position)]);
  client.close(() => {});
}

/**
 * A takes its lease with a bare acquire: it is about to pause, and a paused process sends
 * no renewals. Retries while the gateway is still reading the device's own fence at start.
 */
async function acquireOnce(client: FencegateClient, actuator: string): Promise<number> {
  for (let i = 0; ; i++) {
    try {
      const reply = await client.request(actuator, "lease/acquire", { holder: client.holder, ttlMs: TTL_MS });
      return (reply.lease as { token: number }).token;
    } catch (err) {
      if (!(err instanceof FencegateError && err.code === "DEVICE_UNAVAILABLE") || i > 100) throw err;
      await sleep(50);
    }
  }
}

async function withoutFencing(s: Setup): Promise<number> {
  console.log("\n1. Leases only: the controllers take a lease from the gateway, then write the device directly\n");
  const t = new Timeline();
  const tokenA = await acquireOnce(s.a, "valve-plain");
  t.line("A", `lease granted (token ${tokenA}, ttl ${TTL_MS} ms); about to write position=${A_POSITION}`);
  t.line("A", `... paused for ${PAUSE_MS} ms (GC, swap, a slow network); its lease runs out`);
  await sleep(TTL_MS + 50);
  t.line("gateway", "A's lease expired");
  const leaseB = await s.b.acquire("valve-plain", { ttlMs: TTL_MS });
  t.line("B", `lease granted (token ${leaseB.token})`);
  await directWrite(s.plainSim.tcp!.port, B_POSITION);
  t.line("B", `wrote position=${B_POSITION} to the device     -> device at ${s.plainSim.device(1).targetPosition} %`);
  await sleep(PAUSE_MS - TTL_MS - 50);
  t.line("A", "wakes up, still believes it holds the lease");
  await directWrite(s.plainSim.tcp!.port, A_POSITION);
  const final = s.plainSim.device(1).targetPosition;
  t.line("A", `wrote position=${A_POSITION} to the device     -> device at ${final} %`);
  console.log(`\n   Result: the valve is at ${final} %. B's position was overwritten by a controller`);
  console.log("   whose lease had expired. The lease gave permission to try; nothing checked who won.");
  await leaseB.release();
  return final;
}

async function throughFencegate(s: Setup): Promise<{ final: number; code: string }> {
  console.log("\n2. Through fencegate: every command carries the lease's token; the gateway and the device check it\n");
  const t = new Timeline();
  const tokenA = await acquireOnce(s.a, "valve-fenced");
  t.line("A", `lease granted (token ${tokenA}, ttl ${TTL_MS} ms); about to send position=${A_POSITION}`);
  t.line("A", `... paused for ${PAUSE_MS} ms`);
  await sleep(TTL_MS + 50);
  t.line("gateway", "A's lease expired");
  const leaseB = await s.b.acquire("valve-fenced", { ttlMs: TTL_MS });
  t.line("B", `lease granted (token ${leaseB.token}): the gateway's fence is now ${leaseB.token}`);
  const applied = await leaseB.command({ position: B_POSITION });
  t.line(
    "B",
    `position=${B_POSITION} applied (token ${applied.token}, seq ${applied.seq}) -> device at ${s.fencedSim.device(1).targetPosition} %`,
  );
  await sleep(PAUSE_MS - TTL_MS - 50);
  t.line("A", `wakes up and sends position=${A_POSITION} with its old token ${tokenA}`);
  let code = "none";
  try {
    await s.a.request("valve-fenced", "command", { holder: "controller-A", token: tokenA, seq: 0, set: { position: A_POSITION } });
    t.line("gateway", "applied it (this must not happen)");
  } catch (err) {
    if (!(err instanceof FencegateError)) throw err;
    code = err.code;
    t.line("gateway", `REFUSED ${err.code}: ${err.message.replace(/^[A-Z_]+: /, "")}`);
  }
  const device = s.fencedSim.device(1);
  t.line("device", `still at ${device.targetPosition} %, its own fence at token ${device.fence.token}`);
  console.log(`\n   Result: the valve is at ${device.targetPosition} %. A's stale command was refused: A now re-reads`);
  console.log("   state and acquires a new lease if it still has work to do. Nothing stale reached the device.");
  await leaseB.release();
  return { final: device.targetPosition, code };
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { broker: { type: "string", short: "b" }, help: { type: "boolean", short: "h" } } });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  console.log("fencegate demo: a lease is permission to try; the token is permission to win.");
  const s = await setUp(values.broker);
  try {
    const plainFinal = await withoutFencing(s);
    const fenced = await throughFencegate(s);
    const ok = plainFinal === A_POSITION && fenced.final === B_POSITION && fenced.code === "STALE_TOKEN";
    console.log(
      ok ? "\nSummary: without fencing the stale write won; with fencegate it was refused." : "\nSummary: UNEXPECTED outcome, see above.",
    );
    return ok ? 0 : 1;
  } finally {
    await Promise.all([s.a.close(), s.b.close()]);
    await s.daemon.stop();
    await Promise.all([s.plainSim.close(), s.fencedSim.close()]);
    await s.broker.close();
    rmSync(s.dir, { recursive: true, force: true });
  }
}
