/**
 * What the shell writes to the log for each decision (src/shell/decision-events.ts): a lease's
 * grant, end and expiry at info; the routine rest (renewals, refusals one by one) at debug,
 * so that a standby waiting out LEASE_HELD or a 3 s lease renewed every second does not
 * write a line a second to the SD card. Driven in this process over the in-memory journal.
 */
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { MemoryJournal } from "../../../src/adapters/journal/memory.ts";
import type { Gateway } from "../../../src/shell/gateway.ts";
import type { DevicePort, OutboundReply } from "../../../src/shell/ports.ts";
import { startInProcessGateway } from "../../support/in-process-gateway.ts";
import { until } from "../../support/watch.ts";

const A = "valve-1";
const turn = () => new Promise<void>((r) => setImmediate(r));

interface Line {
  level: number;
  msg: string;
  [k: string]: unknown;
}
const DEBUG = 20;
const INFO = 30;

const device: DevicePort = {
  write: () => Promise.resolve({ kind: "applied", applied: { position: 1 } }),
  read: () => Promise.resolve({ position: 0 }),
  readFence: () => Promise.resolve(null),
};

function setup(options: { refusalSummaryMs?: number } = {}) {
  const journal = new MemoryJournal({ recentLimit: 8 });
  const lines: Line[] = [];
  const replies = new Map<number, OutboundReply>();
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s) as Line) });
  const gateway = startInProcessGateway({
    journal,
    snapshots: journal.load(),
    devices: new Map([[A, device]]),
    limits: { minTtlMs: 50 },
    outbox: { reply: (ref, reply) => replies.set(ref, reply), event: () => {}, state: () => {} },
    log,
    ...options,
  });
  let ref = 1;
  const submit = async (request: Parameters<Gateway["submit"]>[2]) => {
    const r = ref++;
    gateway.submit(A, r, request);
    for (let i = 0; i < 5 && !replies.has(r); i++) await turn();
    return replies.get(r)!;
  };
  const decisions = () => lines.filter((l) => typeof l["type"] === "string");
  return { gateway, lines, submit, decisions };
}

describe("the decision log", () => {
  it("writes a lease's grant, release and expiry at info; renewals and LEASE_HELD at debug", async () => {
    const { gateway, submit, decisions } = setup();
    await turn();
    const grant = await submit({ verb: "lease/acquire", holder: "line-a", ttlMs: 30_000 });
    expect(grant).toMatchObject({ ok: true });
    const token = (grant as { lease: { token: number } }).lease.token;
    expect(await submit({ verb: "lease/renew", holder: "line-a", token })).toMatchObject({ ok: true });
    expect(await submit({ verb: "lease/acquire", holder: "standby", ttlMs: 30_000 })).toMatchObject({
      ok: false,
      error: { code: "LEASE_HELD" },
    });
    expect(await submit({ verb: "lease/release", holder: "line-a", token })).toMatchObject({ ok: true });
    const short = await submit({ verb: "lease/acquire", holder: "line-b", ttlMs: 50 });
    expect(short).toMatchObject({ ok: true });
    await until(() => decisions().some((l) => l["type"] === "expired"), { what: "the expiry" });
    expect(decisions().map((l) => [l["type"], l["holder"], l["code"], l.level])).toEqual([
      ["granted", "line-a", undefined, INFO],
      ["renewed", "line-a", undefined, DEBUG],
      ["rejected", "standby", "LEASE_HELD", DEBUG],
      ["released", "line-a", undefined, INFO],
      ["granted", "line-b", undefined, INFO],
      ["expired", "line-b", undefined, INFO],
    ]);
    expect(decisions().find((l) => l["type"] === "rejected")?.["msg"]).toBe("refused");
    gateway.stop();
  });

  it("summarises refusals in one line per holder and code per interval, with the count, instead of one line each", async () => {
    const { gateway, submit, lines } = setup({ refusalSummaryMs: 200 });
    await turn();
    const grant = await submit({ verb: "lease/acquire", holder: "line-a", ttlMs: 30_000 });
    const token = (grant as { lease: { token: number } }).lease.token;
    for (let i = 0; i < 5; i++) await submit({ verb: "lease/acquire", holder: "standby", ttlMs: 30_000 });
    for (let i = 0; i < 3; i++) await submit({ verb: "command", holder: "intruder", token, seq: i, set: { position: 1 } });
    expect(lines.filter((l) => l.level >= INFO && l["holder"] !== "line-a")).toEqual([]);
    await until(() => lines.filter((l) => typeof l["count"] === "number").length >= 2, { what: "the summaries" });
    const summaries = lines
      .filter((l) => typeof l["count"] === "number")
      .map((l) => [l["actuator"], l["holder"], l["code"], l["count"], l.level]);
    expect(summaries).toEqual([
      [A, "standby", "LEASE_HELD", 5, DEBUG],
      [A, "intruder", "NOT_HOLDER", 3, INFO],
    ]);
    // A new interval starts with the next refusal.
    await submit({ verb: "command", holder: "intruder", token, seq: 9, set: { position: 1 } });
    gateway.stop();
    expect(lines.at(-1)).toMatchObject({ holder: "intruder", code: "NOT_HOLDER", count: 1, level: INFO });
  });
});
