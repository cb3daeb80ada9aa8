/**
 * The second child of sqlite-fsync.test.ts, run under strace: the real Gateway (the daemon's
 * clock and scheduler) over the real SQLite journal, one plain actuator whose device answers
 * a command after a few milliseconds, as a Modbus transaction does. It takes ROUNDS leases,
 * each followed by COMMANDS sequential commands, and marks on stdout, with single write(2)
 * calls that strace shows in order with the journal's own system calls:
 *   `acquire r` before the r-th acquire is submitted, `granted r` when its reply leaves;
 *   `arrive r.c` before a command is submitted, `reply r.c <kind>` when its reply leaves;
 *   `drain 0` and `drained 0` around the clean stop.
 * The audit lag is set beyond the run's length, so the commands' records are committed only
 * by the next grant's commit (which carries them) or at the drain: no commit falls into a
 * request's window by the clock, and each window shows exactly what that request itself
 * caused. (With the default lag a background commit may land inside a later command's
 * window; the command would not wait for it, but the trace could not tell.)
 *
 * Usage: node --import tsx pipeline-child.ts <journal> <rounds> <commands>
 */
import fs from "node:fs";
import { openSqliteJournal } from "../../../src/adapters/journal/sqlite.ts";
import type { GatewayRequest } from "../../../packages/protocol/src/index.ts";
import { DEFAULT_AUDIT_BOUNDS } from "../../../src/shell/group-commit.ts";
import type { DevicePort, OutboundReply } from "../../../src/shell/ports.ts";
import { startInProcessGateway } from "../../support/in-process-gateway.ts";

const [file, roundsText, commandsText] = process.argv.slice(2);
if (file === undefined || roundsText === undefined || commandsText === undefined)
  throw new Error("usage: pipeline-child.ts <journal> <rounds> <commands>");
const ACTUATOR = "valve-1";
/** About one Modbus RTU transaction at 19200 baud. */
const DEVICE_MS = 3;

const mark = (line: string) => void fs.writeSync(1, `${line}\n`);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let position = 0;
const device: DevicePort = {
  write: async (cmd) => {
    await sleep(DEVICE_MS);
    position = cmd.set.position ?? position;
    return { kind: "applied", applied: { position } };
  },
  read: async () => ({ position }),
  readFence: async () => null,
};

const journal = openSqliteJournal({ path: file, recentLimit: 16 });
const waiting = new Map<number, (reply: OutboundReply) => void>();
const gateway = startInProcessGateway({
  gatewayId: "strace",
  journal,
  snapshots: journal.load(),
  devices: new Map([[ACTUATOR, device]]),
  limits: { recentLimit: 16, safeRetryMinMs: 20, safeRetryMaxMs: 300 },
  pollIntervalMs: 60_000,
  defaultDeadlineMs: 1_000,
  outbox: { reply: (ref, reply) => waiting.get(ref)?.(reply), event: () => {}, state: () => {} },
  audit: { ...DEFAULT_AUDIT_BOUNDS, lagMs: 3_600_000 },
});

/** Submits one request; `onReply` runs in the outbox's call, before any other I/O. */
function send(request: GatewayRequest, onReply: (reply: OutboundReply) => void): Promise<OutboundReply> {
  const ref = gateway.allocateRef();
  return new Promise((resolve) => {
    waiting.set(ref, (reply) => {
      waiting.delete(ref);
      onReply(reply);
      resolve(reply);
    });
    gateway.submit(ACTUATOR, ref, request);
  });
}

while (gateway.view(ACTUATOR)?.online !== true) await sleep(1);
for (let r = 0; r < Number(roundsText); r++) {
  const holder = `ctl-${r}`;
  mark(`acquire ${r}`);
  const granted = await send({ verb: "lease/acquire", holder, ttlMs: 60_000 }, () => mark(`granted ${r}`));
  if (!granted.ok || !("lease" in granted) || granted.lease === null) throw new Error(`acquire ${r} refused: ${JSON.stringify(granted)}`);
  const { token } = granted.lease;
  for (let c = 0; c < Number(commandsText); c++) {
    mark(`arrive ${r}.${c}`);
    const reply = await send({ verb: "command", holder, token, seq: c, set: { position: c % 100 } }, (reply) =>
      mark(`reply ${r}.${c} ${reply.ok && "outcome" in reply ? reply.outcome : "refused"}`),
    );
    if (!reply.ok) throw new Error(`command ${r}.${c} refused: ${JSON.stringify(reply)}`);
  }
  await send({ verb: "lease/release", holder, token }, () => {});
}
mark("drain 0");
await gateway.drain(1_000);
mark("drained 0");
journal.close();
