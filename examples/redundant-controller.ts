/**
 * A redundant controller: run two copies (primary and standby) with different holder ids.
 * Whichever holds the lease drives the valve; the other waits. If the active one pauses or
 * dies, its lease runs out, the standby takes over with a higher token, and anything the
 * old one still sends is refused by the gateway (and by the fenced device).
 *
 *   node --import tsx examples/redundant-controller.ts --holder line-2-primary
 *   node --import tsx examples/redundant-controller.ts --holder line-2-standby
 */
import { parseArgs } from "node:util";
import { FencegateClient, FencegateError, type Lease } from "fencegate-client";

const { values } = parseArgs({
  options: {
    holder: { type: "string" },
    broker: { type: "string", default: process.env.FENCEGATE_BROKER ?? "mqtt://127.0.0.1:1883" },
    actuator: { type: "string", default: "valve-1" },
    "ttl-ms": { type: "string", default: "3000" },
    "run-ms": { type: "string" },
  },
});
if (!values.holder) throw new Error("--holder is required, e.g. line-2-primary");

const client = await FencegateClient.connect({ url: values.broker!, holder: values.holder });
const actuator = values.actuator!;
const ttlMs = Number(values["ttl-ms"]);
const log = (msg: string) => console.log(`${new Date().toISOString()} ${values.holder} ${msg}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stopAt = values["run-ms"] ? Date.now() + Number(values["run-ms"]) : Number.POSITIVE_INFINITY;

/** What this controller wants the valve to do: here, a slow sweep. */
function setpoint(): number {
  return Math.round(50 + 40 * Math.sin(Date.now() / 10_000));
}

async function drive(lease: Lease): Promise<void> {
  log(`active with token ${lease.token}`);
  while (!lease.lost && Date.now() < stopAt) {
    try {
      const { applied, seq } = await lease.command({ position: setpoint() }, { deadlineMs: 1000 });
      log(`applied position=${applied.position} (seq ${seq})`);
    } catch (err) {
      if (!(err instanceof FencegateError)) throw err;
      // Rejection is normal recovery: the code says what to do next.
      if (err.endsLease) break; // someone newer holds it: go back to standby
      if (err.code === "OUTCOME_UNKNOWN") log(`outcome unknown; device now reads ${JSON.stringify(err.state)}`);
      else log(`${err.code}: ${err.message}`);
    }
    await sleep(500);
  }
  if (lease.lost) log(`lease lost: ${lease.lost.message}`);
  else await lease.release().catch(() => {});
}

while (Date.now() < stopAt) {
  try {
    await drive(await client.acquire(actuator, { ttlMs }));
  } catch (err) {
    if (err instanceof FencegateError && err.code === "LEASE_HELD") {
      log(`standby: ${err.lease?.holder} is active`);
      await sleep(Math.min(ttlMs, (err.lease?.expiresInMs ?? ttlMs) + 50));
      continue;
    }
    log(`cannot acquire: ${String(err)}`);
    await sleep(1000);
  }
}
await client.close();
