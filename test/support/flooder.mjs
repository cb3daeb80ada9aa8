// A broker client with no lease that floods one actuator's request topics, in a process of
// its own (a flood in the test's process would starve the holder it is meant to test):
// acquires, renewals and commands under holder "intruder" and a token that is not the
// lease's, QoS 0, at up to `rate` per second for `ms`. Prints how many it sent, then exits.
// Usage: node flooder.mjs <brokerUrl> <base>/<actuator> <rate> <ms>
import mqtt from "mqtt";

const [url, prefix, rate, ms] = process.argv.slice(2);
const client = await mqtt.connectAsync(url, { protocolVersion: 4, clientId: `intruder-${process.pid}`, reconnectPeriod: 0 });
const TICK_MS = 10;
const perTick = Math.max(1, Math.round((Number(rate) * TICK_MS) / 1000));
const startedMs = performance.now();
let n = 0;
while (performance.now() - startedMs < Number(ms)) {
  const tickMs = performance.now();
  for (let i = 0; i < perTick; i++, n++) {
    const id = `x-${n}`;
    const [verb, body] =
      n % 3 === 0
        ? ["lease/acquire", { id, holder: "intruder", ttlMs: 5000 }]
        : n % 3 === 1
          ? ["lease/renew", { id, holder: "intruder", token: 1 }]
          : ["command", { id, holder: "intruder", token: 1, seq: n, set: { position: 1 } }];
    client.publish(`${prefix}/${verb}`, JSON.stringify(body), { qos: 0 });
  }
  if (client.stream.writableNeedDrain) await new Promise((r) => client.stream.once("drain", r));
  await new Promise((r) => setTimeout(r, Math.max(0, TICK_MS - (performance.now() - tickMs))));
}
await client.endAsync();
process.stdout.write(`${n}\n`);
