/**
 * The operator's commands: `fencegate lease|send|read|status|watch`. They speak the MQTT
 * API through the client library, print for people by default and JSON with --json, and
 * exit with a code per class of outcome so scripts can branch on it.
 */
import { hostname } from "node:os";
import type { ParseArgsConfig } from "node:util";
import {
  DEFAULT_TTL_MS,
  FencegateClient,
  FencegateError,
  FencegateTimeoutError,
  HOLDER_PATTERN,
  withGatewayStatus,
  type ActuatorState,
} from "fencegate-client";
import { loadConfigFile } from "../config/load.ts";
import { ArgsError, parseCommandLine } from "./args.ts";
import { SeqCounterError, SeqCounters, stateDir } from "./seq-counter.ts";
import { EXIT } from "../exit-codes.ts";

const CODE_CLASS: Record<string, number> = {
  LEASE_HELD: EXIT.REFUSED,
  NOT_HOLDER: EXIT.REFUSED,
  LEASE_EXPIRED: EXIT.REFUSED,
  STALE_TOKEN: EXIT.REFUSED,
  UNKNOWN_TOKEN: EXIT.REFUSED,
  STALE_SEQ: EXIT.REFUSED,
  DUPLICATE: EXIT.REFUSED,
  DEVICE_REJECTED: EXIT.DEVICE,
  DEVICE_ERROR: EXIT.DEVICE,
  OUTCOME_UNKNOWN: EXIT.DEVICE,
  DEVICE_UNAVAILABLE: EXIT.UNAVAILABLE,
  OVERLOADED: EXIT.UNAVAILABLE,
  DEADLINE_EXCEEDED: EXIT.UNAVAILABLE,
  INVALID_REQUEST: EXIT.INVALID,
  RETAINED_REQUEST: EXIT.INVALID,
  UNKNOWN_ACTUATOR: EXIT.INVALID,
  UNKNOWN_POINT: EXIT.INVALID,
  READ_ONLY_POINT: EXIT.INVALID,
  OUT_OF_RANGE: EXIT.INVALID,
  BAD_SIGNATURE: EXIT.REFUSED,
  REPLAYED_REQUEST: EXIT.REFUSED,
  TOKENS_EXHAUSTED: EXIT.REFUSED,
  INTERNAL: EXIT.INTERNAL,
};

const COMMON_OPTIONS = {
  broker: { type: "string", short: "b" },
  holder: { type: "string", short: "H" },
  config: { type: "string", short: "c" },
  base: { type: "string" },
  username: { type: "string" },
  password: { type: "string" },
  mqtt3: { type: "boolean" },
  json: { type: "boolean" },
  "timeout-ms": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies ParseArgsConfig["options"];

const COMMON_HELP = `connection (flags, else environment, else the daemon's --config file):
  -b, --broker URL        FENCEGATE_BROKER     default mqtt://127.0.0.1:1883
  -H, --holder ID         FENCEGATE_HOLDER     default cli-<hostname>
  -c, --config FILE       take broker, base topic and credentials from a daemon config
      --base TOPIC        FENCEGATE_BASE       default fencegate
      --username U        FENCEGATE_USERNAME
      --password P        FENCEGATE_PASSWORD
      --mqtt3             use MQTT 3.1.1 (replies on <base>/<actuator>/reply/<holder>);
                          without it MQTT 5, falling back to 3.1.1 if the broker refuses 5
      --timeout-ms N      how long to wait for a reply (default 5000)
      --json              print JSON for scripts
  -h, --help

exit codes: 0 ok, 2 refused by lease/fence, 3 device failed or outcome unknown,
            4 unavailable (retry later), 5 invalid request, 64 usage, 70 internal`;

interface Command {
  readonly summary: string;
  readonly usage: string;
  readonly examples: readonly string[];
  /** Said after the examples in --help. */
  readonly notes?: readonly string[];
  readonly options: ParseArgsConfig["options"];
  readonly run: (ctx: Context) => Promise<number>;
}

interface Context {
  readonly args: readonly string[];
  readonly values: Record<string, string | boolean | undefined>;
  readonly json: boolean;
  /** The connection settings (flags, environment, --config), checked; no connection yet. */
  settings(): ConnectionSettings;
  /** The --config file's leases.defaultTtlMs, else the client library's default. */
  defaultTtlMs(): number;
  connect(): Promise<FencegateClient>;
  /**
   * `request` (a request to the gateway), or an error saying plainly that no gateway is
   * online: when no reply came within NO_GATEWAY_MS and no gateway says online on
   * B/gateway/+/status (retained) within GATEWAY_STATUS_WAIT_MS more.
   */
  answered<T>(request: Promise<T>): Promise<T>;
  /** A command's result: `human`, or with --json `{"ok": true, ...json}`. */
  print(human: string, json: Record<string, unknown>): void;
  /** One item of a stream (watch): `human`, or with --json the item as it is. */
  printItem(human: string, json: unknown): void;
}

class UsageError extends Error {}

/** No gateway has said it is online under the base topic, and no reply came. */
class NoGatewayError extends Error {}

/** How long a request may go unanswered before the CLI looks whether any gateway is online. */
const NO_GATEWAY_MS = 1000;
/** Retained statuses arrive right after subscribing: this is ample. */
const GATEWAY_STATUS_WAIT_MS = 500;

/**
 * Whether any gateway says online (its retained B/gateway/<id>/status). Subscribes only for
 * the look: a command's own subscription to the same filter later (status, watch) must
 * get the retained statuses again, which a subscription still in place would prevent.
 */
async function anyGatewayOnline(client: FencegateClient): Promise<boolean> {
  let statuses: Awaited<ReturnType<FencegateClient["gatewayStatuses"]>> | undefined;
  let sawOnline = () => {};
  const online = new Promise<void>((resolve) => (sawOnline = resolve));
  statuses = await client.gatewayStatuses(() => statuses?.anyOnline() && sawOnline());
  if (!statuses.anyOnline()) await Promise.race([online, new Promise((resolve) => setTimeout(resolve, GATEWAY_STATUS_WAIT_MS))]);
  const answer = statuses.anyOnline();
  await statuses.stop();
  return answer;
}

function need(ctx: Context, index: number, what: string): string {
  const v = ctx.args[index];
  if (v === undefined) throw new UsageError(`missing ${what}`);
  return v;
}

function integer(value: string | boolean | undefined, name: string, min = 0): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (typeof value !== "string" || !/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min)
    throw new UsageError(`--${name} must be an integer ≥ ${min}`);
  return n;
}

function requiredInteger(value: string | boolean | undefined, name: string, min = 0): number {
  const n = integer(value, name, min);
  if (n === undefined) throw new UsageError(`--${name} is required`);
  return n;
}

/**
 * Decimal numbers only: Number() would also take "" and " " (as 0), "0x1F" and "0b11", and
 * "1e3"; an operator's typo must not become a setpoint.
 */
const DECIMAL = /^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$/;

function parseSet(pairs: readonly string[]): Record<string, number> {
  if (pairs.length === 0) throw new UsageError("give at least one point=value");
  const set: Record<string, number> = {};
  for (const pair of pairs) {
    const m = /^([A-Za-z0-9_.-]+)=(.*)$/.exec(pair);
    if (!m || !DECIMAL.test(m[2]!))
      throw new UsageError(`"${pair}" is not point=number (a decimal number, such as position=42.5 or offset=-3)`);
    // A command carries one value per point: which of two the operator meant is a guess.
    if (Object.hasOwn(set, m[1]!)) throw new UsageError(`${m[1]} is given twice (${m[1]}=${set[m[1]!]} and ${pair}): give each point once`);
    set[m[1]!] = Number(m[2]);
  }
  return set;
}

function formatState(s: ActuatorState): string {
  const lease = s.lease ? `${s.lease.holder} (token ${s.lease.token}, ${Math.round(s.lease.expiresInMs)} ms left)` : "free";
  const points = Object.entries(s.points)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
  const faults = Object.entries(s.pointFaults ?? {}).map(([k, why]) => `${k} ${why}`);
  // Offline, the points are the last the device gave: say how old they are.
  const age =
    s.online || s.pointsAgeMs === undefined
      ? ""
      : s.pointsAgeMs === null
        ? " (never read)"
        : ` (read ${(s.pointsAgeMs / 1000).toFixed(1)} s ago)`;
  return [
    `${s.actuator}: ${s.online ? "online" : "OFFLINE"}`,
    ...(s.problem === undefined ? [] : [`  why    ${s.problem}`]),
    `  lease  ${lease}`,
    `  fence  token ${s.fence.token}, seq ${s.fence.seq ?? "-"}`,
    `  points ${points || "-"}${age}`,
    ...(faults.length === 0 ? [] : [`  faults ${faults.join("; ")}`]),
  ].join("\n");
}

/** `lease renew` and `lease release`: the same request on a token, answered differently. */
function leaseTokenCommand(
  verb: "lease/renew" | "lease/release",
  summary: string,
  report: (
    actuator: string,
    token: number,
    lease: { holder: string; token: number; ttlMs: number } | null,
  ) => [string, Record<string, unknown>],
): Command {
  const name = verb.replace("/", " ");
  return {
    summary,
    usage: `fencegate ${name} ACTUATOR --token N`,
    examples: [`fencegate ${name} valve-1 --token 7 --holder line-2`],
    options: { token: { type: "string" } },
    async run(ctx) {
      const actuator = need(ctx, 0, "ACTUATOR");
      const token = requiredInteger(ctx.values.token, "token", 1);
      const client = await ctx.connect();
      const reply = await ctx.answered(client.request(actuator, verb, { holder: client.holder, token }));
      ctx.print(...report(actuator, token, reply.lease as { holder: string; token: number; ttlMs: number } | null));
      return EXIT.OK;
    },
  };
}

const COMMANDS: Record<string, Command> = {
  "lease acquire": {
    summary: "take the lease on an actuator and print its token",
    usage: "fencegate lease acquire ACTUATOR [--ttl-ms N]",
    examples: [
      "fencegate lease acquire valve-1 --ttl-ms 30000 --holder line-2",
      `fencegate lease acquire valve-1 -c /etc/fencegate/gateway.yaml   # ttl: its leases.defaultTtlMs (without -c: ${DEFAULT_TTL_MS} ms)`,
      "TOKEN=$(fencegate lease acquire valve-1 --ttl-ms 30000 --json | jq .token)",
    ],
    options: { "ttl-ms": { type: "string" } },
    async run(ctx) {
      const actuator = need(ctx, 0, "ACTUATOR");
      const ttlMs = integer(ctx.values["ttl-ms"], "ttl-ms", 1) ?? ctx.defaultTtlMs();
      const client = await ctx.connect();
      const reply = await ctx.answered(client.request(actuator, "lease/acquire", { holder: client.holder, ttlMs }));
      const lease = reply.lease as { holder: string; token: number; ttlMs: number };
      ctx.print(`${actuator}: lease granted to ${lease.holder}, token ${lease.token}, ttl ${lease.ttlMs} ms (renew before it runs out)`, {
        actuator,
        ...lease,
      });
      return EXIT.OK;
    },
  },
  "lease renew": leaseTokenCommand("lease/renew", "renew a lease before it expires (keeps the token)", (actuator, token, lease) => [
    `${actuator}: lease ${token} renewed for ${lease!.ttlMs} ms`,
    { actuator, ...lease },
  ]),
  "lease release": leaseTokenCommand("lease/release", "give a lease back", (actuator, token) => [
    `${actuator}: lease ${token} released`,
    { actuator, token, released: true },
  ]),
  send: {
    summary: "send a command under a lease's token",
    usage: "fencegate send ACTUATOR POINT=VALUE... --token N [--seq N] [--deadline-ms N]",
    examples: [
      "fencegate send valve-1 position=42.5 --token 7 --holder line-2",
      "fencegate send valve-1 position=0 --token 7 --seq 12 --deadline-ms 2000 --holder line-2",
    ],
    notes: [
      "Without --seq: one more than the last seq sent from this account under the same broker,",
      "actuator, holder and token (a counter in $FENCEGATE_STATE_DIR, else ~/.local/state/fencegate;",
      "not the clock, which may step back), moved above the gateway's fence when it answers",
      "STALE_SEQ or DUPLICATE. Sending under one token from several places at once: give --seq.",
    ],
    options: { token: { type: "string" }, seq: { type: "string" }, "deadline-ms": { type: "string" } },
    async run(ctx) {
      const actuator = need(ctx, 0, "ACTUATOR");
      const set = parseSet(ctx.args.slice(1));
      const token = requiredInteger(ctx.values.token, "token", 1);
      const given = integer(ctx.values.seq, "seq");
      const deadlineMs = integer(ctx.values["deadline-ms"], "deadline-ms", 1);
      const settings = ctx.settings();
      const counters = given === undefined ? new SeqCounters(stateDir()) : null;
      const key = `${new URL(settings.url).host}/${settings.baseTopic}/${actuator} ${settings.holder} ${token}`;
      let seq = given ?? counters!.next(key);
      const client = await ctx.connect();
      const send = () =>
        ctx.answered(
          client.request(actuator, "command", {
            holder: client.holder,
            token,
            seq,
            set,
            ...(deadlineMs !== undefined ? { deadlineMs } : {}),
          }),
        );
      let reply;
      try {
        reply = await send();
      } catch (err) {
        // The counter's seq was used elsewhere under this holder and token (another machine, a
        // lost state file): nothing was applied; once more, above the fence.
        const fence = err instanceof FencegateError ? err.fence : undefined;
        if (
          counters === null ||
          !(err instanceof FencegateError) ||
          !["STALE_SEQ", "DUPLICATE"].includes(err.code) ||
          fence?.token !== token ||
          fence.seq === null
        )
          throw err;
        seq = counters.next(key, fence.seq + 1);
        reply = await send();
      }
      const applied = reply.applied as Record<string, number>;
      ctx.print(
        `${actuator}: applied ${Object.entries(applied)
          .map(([k, v]) => `${k}=${v}`)
          .join(" ")} (token ${token}, seq ${seq})`,
        { actuator, token, seq, applied },
      );
      return EXIT.OK;
    },
  },
  read: {
    summary: "read an actuator's device state, lease and fence, fresh from the device",
    usage: "fencegate read ACTUATOR",
    examples: ["fencegate read valve-1", "fencegate read valve-1 --json | jq .fence"],
    options: {},
    async run(ctx) {
      const actuator = need(ctx, 0, "ACTUATOR");
      const client = await ctx.connect();
      const state = await ctx.answered(client.read(actuator));
      ctx.print(formatState(state), { ...state });
      return EXIT.OK;
    },
  },
  status: {
    summary: "every actuator the broker has a state for: holder, token, fence, online, points",
    usage: "fencegate status [--wait-ms N]",
    examples: ["fencegate status", "fencegate status --json"],
    options: { "wait-ms": { type: "string" } },
    async run(ctx) {
      const waitMs = integer(ctx.values["wait-ms"], "wait-ms") ?? 500;
      const client = await ctx.connect();
      const states = new Map<string, ActuatorState>();
      const gateways = await client.gatewayStatuses();
      const stop = await client.subscribe(`${client.base}/+/state`, (_t, body) => {
        const s = body as ActuatorState;
        if (typeof s?.actuator === "string") states.set(s.actuator, s);
      });
      // Retained states arrive right after subscribing; wait until they stop coming.
      await new Promise((r) => setTimeout(r, waitMs));
      await Promise.all([stop(), gateways.stop()]);
      // A gateway that is offline (stopped, or its last will) serves no lease, whatever its last state said.
      const rows = [...states.values()]
        .map((s) => withGatewayStatus(s, gateways.get(s.gateway)))
        .sort((a, b) => a.actuator.localeCompare(b.actuator));
      const table = [
        ["ACTUATOR", "ONLINE", "HOLDER", "TOKEN", "FENCE", "POINTS"],
        ...rows.map((s) => [
          s.actuator,
          s.online ? "yes" : "NO",
          s.lease?.holder ?? "-",
          s.lease ? String(s.lease.token) : "-",
          `${s.fence.token}/${s.fence.seq ?? "-"}`,
          Object.entries(s.points)
            .map(([k, v]) => `${k}=${v}`)
            .join(" "),
        ]),
      ];
      const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
      const human =
        rows.length === 0
          ? "no actuator states on this broker (is the daemon running? right --base?)"
          : table
              .map((r) =>
                r
                  .map((c, i) => c.padEnd(widths[i]!))
                  .join("  ")
                  .trimEnd(),
              )
              .join("\n");
      ctx.print(human, { actuators: rows });
      return EXIT.OK;
    },
  },
  watch: {
    summary: "follow an actuator's states and decisions as they happen",
    usage: "fencegate watch ACTUATOR [--count N]",
    examples: ["fencegate watch valve-1", "fencegate watch valve-1 --json --count 10"],
    options: { count: { type: "string" } },
    async run(ctx) {
      const actuator = need(ctx, 0, "ACTUATOR");
      const count = integer(ctx.values.count, "count", 1);
      const client = await ctx.connect();
      // Said at once if the gateway does not know the actuator, or no gateway is online;
      // a device that is down does not stop the watch.
      await ctx.answered(client.read(actuator)).catch((err: unknown) => {
        if (!(err instanceof FencegateError) || CODE_CLASS[err.code] === EXIT.INVALID) throw err;
      });
      const abort = new AbortController();
      process.once("SIGINT", () => abort.abort());
      let seen = 0;
      for await (const item of client.watch(actuator, { signal: abort.signal })) {
        if (item.kind === "state") ctx.printItem(`[state] ${formatState(item.state).replace(/\n\s*/g, " | ")}`, item);
        else {
          const e = item.event;
          const applied =
            e.applied &&
            Object.entries(e.applied)
              .map(([k, v]) => `${k}=${v}`)
              .join(" ");
          const detail = [
            applied,
            e.holder && `holder=${e.holder}`,
            e.token !== undefined && `token=${e.token}`,
            e.seq !== undefined && `seq=${e.seq}`,
            e.code && `code=${e.code}`,
          ]
            .filter(Boolean)
            .join(" ");
          ctx.printItem(`[${e.at}] ${(EVENT_WORDS[e.type] ?? e.type).padEnd(15)} ${detail}`, item);
        }
        if (count !== undefined && ++seen >= count) break;
      }
      return EXIT.OK;
    },
  },
};

/** Events as people read them, the status page's words; --json keeps the wire's types (docs/mqtt-api.md). */
const EVENT_WORDS: Readonly<Record<string, string>> = { rejected: "refused", "outcome-unknown": "outcome unknown" };

function helpFor(name: string, cmd: Command): string {
  return [
    `usage: ${cmd.usage}`,
    "",
    cmd.summary,
    "",
    "examples:",
    ...cmd.examples.map((e) => `  ${e}`),
    "",
    ...(cmd.notes ? [...cmd.notes, ""] : []),
    COMMON_HELP,
  ].join("\n");
}

/** A usage error in three lines: what is wrong, the usage line, where the rest is. */
function shortUsage(name: string, message: string, usage: string): string {
  return `fencegate ${name}: ${message}\nusage: ${usage}\nRun \`fencegate ${name} --help\` for the options and examples.`;
}

/** The options of these commands, by the wire fields the gateway names in INVALID_REQUEST. */
const FLAG_OF_FIELD: Record<string, string> = {
  ttlMs: "--ttl-ms",
  deadlineMs: "--deadline-ms",
  seq: "--seq",
  token: "--token",
  holder: "--holder",
};

/** A reply as a sentence for people: the original outcome a DUPLICATE repeats. */
function outcomeText(reply: unknown): string {
  const r = reply as {
    ok?: boolean;
    applied?: Record<string, number>;
    token?: number;
    seq?: number;
    error?: { code?: string; message?: string };
  } | null;
  if (r?.ok === true && r.applied)
    return `applied ${Object.entries(r.applied)
      .map(([k, v]) => `${k}=${v}`)
      .join(" ")} (token ${r.token}, seq ${r.seq})`;
  if (r?.ok === false && r.error) return `refused ${r.error.code}: ${r.error.message}`;
  return JSON.stringify(reply);
}

function refusalText(err: FencegateError): string {
  // The gateway names its wire fields (ttlMs); the operator typed the CLI's flags (--ttl-ms).
  const message =
    err.code === "INVALID_REQUEST"
      ? err.message.replace(/\b(ttlMs|deadlineMs|seq|token|holder)(?= must)/g, (f) => FLAG_OF_FIELD[f]!)
      : err.message;
  const lines = [
    `${message}${err.lease ? ` (held by ${err.lease.holder}, token ${err.lease.token})` : ""}${err.fence ? ` [fence ${err.fence.token}/${err.fence.seq ?? "-"}]` : ""}`,
  ];
  if (err.original !== undefined) lines.push(`  original: ${outcomeText(err.original)}`);
  return lines.join("\n");
}

/** Commands with subcommands ("lease acquire"): their names and what each does. */
function groupHelp(group: string): string | null {
  const members = Object.entries(COMMANDS).filter(([name]) => name.startsWith(`${group} `));
  if (members.length === 0) return null;
  const width = Math.max(...members.map(([name]) => name.length));
  return [
    `usage: fencegate ${group} <${members.map(([name]) => name.slice(group.length + 1)).join("|")}> ACTUATOR [options]`,
    "",
    ...members.map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    "",
    `Run \`fencegate ${group} <command> --help\` for its options and examples.`,
  ].join("\n");
}

function resolveCommand(argv: readonly string[]): { name: string; rest: string[] } | null {
  const two = `${argv[0]} ${argv[1]}`;
  if (COMMANDS[two]) return { name: two, rest: argv.slice(2) };
  if (argv[0] !== undefined && COMMANDS[argv[0]]) return { name: argv[0], rest: argv.slice(1) };
  return null;
}

const BROKER_PROTOCOLS = ["mqtt:", "mqtts:", "ws:", "wss:"];

/** The broker URL, or a usage error naming where it came from. */
function brokerUrl(url: string, from: string): string {
  let parsed: URL | null = null;
  try {
    parsed = new URL(url);
  } catch {
    // not a URL at all: said below
  }
  if (parsed === null || !BROKER_PROTOCOLS.includes(parsed.protocol) || parsed.hostname === "") {
    throw new UsageError(
      `${from} "${url.slice(0, 200)}" is not a broker URL: mqtt://HOST:1883, mqtts://HOST:8883, ws://HOST/PATH or wss://HOST/PATH`,
    );
  }
  return url;
}

type ConnectionSettings = ReturnType<typeof connectionSettings>;

function connectionSettings(values: Record<string, string | boolean | undefined>) {
  const env = process.env;
  const file = typeof values.config === "string" ? loadConfigFile(values.config) : undefined;
  const str = (v: string | boolean | undefined) => (typeof v === "string" ? v : undefined);
  const holder = str(values.holder) ?? env.FENCEGATE_HOLDER ?? `cli-${hostname().replace(/[^A-Za-z0-9._:-]/g, "-")}`;
  if (!HOLDER_PATTERN.test(holder))
    throw new UsageError(`holder "${holder}" is not allowed: 1 to 128 characters of A-Z a-z 0-9 . _ : - (no spaces)`);
  const url =
    str(values.broker) !== undefined
      ? brokerUrl(str(values.broker)!, "--broker")
      : env.FENCEGATE_BROKER
        ? brokerUrl(env.FENCEGATE_BROKER, "FENCEGATE_BROKER")
        : (file?.mqtt.url ?? "mqtt://127.0.0.1:1883");
  return {
    url,
    defaultTtlMs: file?.leases.defaultTtlMs ?? DEFAULT_TTL_MS,
    holder,
    baseTopic: str(values.base) ?? env.FENCEGATE_BASE ?? file?.mqtt.baseTopic ?? "fencegate",
    username: str(values.username) ?? env.FENCEGATE_USERNAME ?? file?.mqtt.username,
    password: str(values.password) ?? env.FENCEGATE_PASSWORD ?? file?.mqtt.password,
  };
}

/** The broker refused the protocol version (3.1.1's CONNACK code 1, MQTT 5's reason 0x84). */
function refusedProtocol(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 1 || code === 0x84;
}

/**
 * Connects with MQTT 5 unless told to use 3.1.1, and falls back to 3.1.1 by itself when the
 * broker refuses 5 (the embedded broker of `fencegate start`, older brokers).
 */
async function connectNegotiating(
  settings: ReturnType<typeof connectionSettings>,
  mqtt3: boolean,
  timeoutMs: number,
): Promise<FencegateClient> {
  const options = { ...settings, requestTimeoutMs: timeoutMs };
  const attempt = (protocolVersion: 4 | 5) =>
    Promise.race([
      FencegateClient.connect({ ...options, protocolVersion }),
      new Promise<never>((_, reject) =>
        setTimeout(
          () => reject(new FencegateTimeoutError(`cannot reach the broker at ${settings.url} within ${timeoutMs} ms`)),
          timeoutMs,
        ).unref(),
      ),
    ]);
  if (mqtt3) return attempt(4);
  try {
    return await attempt(5);
  } catch (err) {
    if (!refusedProtocol(err)) throw err;
    return attempt(4);
  }
}

export async function runController(argv: string[]): Promise<number> {
  const resolved = resolveCommand(argv);
  if (!resolved) {
    const group = argv[0] === undefined ? null : groupHelp(argv[0]);
    if (group !== null && (argv[1] === "--help" || argv[1] === "-h")) {
      console.log(group);
      return EXIT.OK;
    }
    console.error(
      group !== null
        ? `fencegate ${argv[0]}: ${argv[1] === undefined ? "which one?" : `unknown command "${argv[1]}"`}\n${group}`
        : `fencegate: unknown command "${argv.join(" ")}". Run \`fencegate --help\` for the commands.`,
    );
    return EXIT.USAGE;
  }
  const cmd = COMMANDS[resolved.name]!;
  let parsed;
  try {
    parsed = parseCommandLine(resolved.rest, { ...COMMON_OPTIONS, ...cmd.options });
  } catch (err) {
    if (!(err instanceof ArgsError)) throw err;
    console.error(shortUsage(resolved.name, err.message, cmd.usage));
    return EXIT.USAGE;
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  if (values.help) {
    console.log(helpFor(resolved.name, cmd));
    return EXIT.OK;
  }
  const json = values.json === true;
  let client: FencegateClient | null = null;
  let broker = "the broker";
  let settings: ConnectionSettings | null = null;
  const ctx: Context = {
    args: parsed.positionals,
    values,
    json,
    settings: () => (settings ??= connectionSettings(values)),
    defaultTtlMs: () => ctx.settings().defaultTtlMs,
    async connect() {
      const settings = ctx.settings();
      broker = settings.url;
      const timeoutMs = integer(values["timeout-ms"], "timeout-ms", 1) ?? 5000;
      const connected = await connectNegotiating(settings, values.mqtt3 === true, timeoutMs);
      client = connected;
      return connected;
    },
    async answered(request) {
      const settled = request.then(
        () => "answered" as const,
        () => "answered" as const,
      );
      const slow = new Promise<"slow">((resolve) => setTimeout(() => resolve("slow"), NO_GATEWAY_MS).unref());
      if ((await Promise.race([settled, slow])) === "slow" && client !== null && !(await anyGatewayOnline(client))) {
        throw new NoGatewayError(
          `no fencegate gateway is online on ${broker} (nothing says online on ${client.base}/gateway/+/status): start the daemon, or check --broker and --base`,
        );
      }
      return request;
    },
    print(human, data) {
      console.log(json ? JSON.stringify({ ok: true, ...data }) : human);
    },
    printItem(human, data) {
      console.log(json ? JSON.stringify(data) : human);
    },
  };
  try {
    return await cmd.run(ctx);
  } catch (err) {
    if (err instanceof UsageError || err instanceof SeqCounterError) {
      console.error(shortUsage(resolved.name, err.message, cmd.usage));
      return EXIT.USAGE;
    }
    if (err instanceof FencegateError) {
      if (json)
        console.log(
          JSON.stringify({
            ok: false,
            error: {
              code: err.code,
              message: err.message.replace(/^[A-Z_]+: /, ""),
              fence: err.fence,
              lease: err.lease,
              original: err.original,
            },
          }),
        );
      else console.error(refusalText(err));
      return CODE_CLASS[err.code] ?? EXIT.INTERNAL;
    }
    const code = (err as { code?: string }).code;
    if (err instanceof FencegateTimeoutError || err instanceof NoGatewayError || code === "ECONNREFUSED") {
      const message =
        code === "ECONNREFUSED"
          ? `cannot reach the broker at ${broker}: connection refused (is it running? set --broker or FENCEGATE_BROKER)`
          : (err as Error).message;
      if (json)
        console.log(JSON.stringify({ ok: false, error: { code: err instanceof NoGatewayError ? "NO_GATEWAY" : "TIMEOUT", message } }));
      else console.error(`no answer: ${message}`);
      return EXIT.UNAVAILABLE;
    }
    console.error(`fencegate ${resolved.name}: ${String(err)}`);
    return EXIT.INTERNAL;
  } finally {
    await (client as FencegateClient | null)?.close().catch(() => {});
  }
}
