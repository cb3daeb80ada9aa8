/**
 * The gateway's configuration file, as a zod schema: shape, bounds, defaults and the
 * cross-field rules. Every refinement here is written against possibly-invalid input and
 * runs even when a sibling field is wrong, so one parse reports every problem at once.
 *
 * Units are in the names: `...Ms` milliseconds, `...S` seconds, `...Bytes` bytes. Objects
 * are strict: an unknown key is an error (parse.ts suggests the closest known key).
 */
import * as z from "zod";
import { leaderHangRoomMs, leadershipConfig } from "../core/leadership.ts";
import { closest } from "./problems.ts";
import { ACTUATOR_PATTERN, CONFIGURED_POINT_NAME_PATTERN } from "../../packages/protocol/src/index.ts";
import { POINT_TYPES, type PointType } from "../adapters/modbus/codec.ts";

// ---------------------------------------------------------------------------------------
// Names and small building blocks

/** An actuator id that would collide with the `B/gateway/<gatewayId>/status` topic. */
export const RESERVED_ACTUATOR_IDS: readonly string[] = ["gateway"];

const HOUR_MS = 3_600_000;
const DEFAULT_BUS_TIMEOUT_MS = 1000;
const DEFAULT_DEADLINE_MS = 5000;

function intIn(min: number, max: number, unit = "") {
  const error = `Must be a whole number${unit} from ${min} to ${max}.`;
  // Not `.int()`: its issue stops every enclosing refinement, and those must still run so
  // that one parse reports every problem.
  return z.number().min(min, { error }).max(max, { error }).refine(Number.isInteger, { error });
}

/** A duration in whole milliseconds within [min, max]. */
function ms(min: number, max: number) {
  return intIn(min, max, " of milliseconds");
}

function id(what: string) {
  return z.string().regex(ACTUATOR_PATTERN, {
    error: `Must be a valid ${what}: 1 to 64 characters of lower-case letters, digits, "-" and "_", starting with a letter or digit.`,
  });
}

function text(what: string, max = 1024) {
  return z
    .string()
    .min(1, { error: `Must not be empty: give the ${what}.` })
    .max(max, { error: `Must be at most ${max} characters.` });
}

/**
 * `when` for the object-level refinements: run even when some fields are wrong (the
 * refinements check each field's type before using it), but only on an actual object.
 */
const ALWAYS = { when: (payload: { value: unknown }) => isRecord(payload.value) } as const;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function finite(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

/** `{minMs, maxMs}`: exponential backoff between attempts, from minMs doubling up to maxMs. */
function backoff(defaults: { minMs: number; maxMs: number }) {
  return z
    .strictObject({
      minMs: ms(10, 600_000).default(defaults.minMs),
      maxMs: ms(10, 600_000).default(defaults.maxMs),
    })
    .superRefine((b, ctx) => {
      if (finite(b.minMs) && finite(b.maxMs) && b.minMs > b.maxMs) {
        ctx.addIssue({
          code: "custom",
          path: ["maxMs"],
          message: `Must be at least minMs (${b.minMs}); the backoff grows from minMs up to maxMs.`,
        });
      }
    }, ALWAYS)
    .prefault({});
}

// ---------------------------------------------------------------------------------------
// MQTT

const topicLevel = z
  .string()
  .min(1, { error: "Must not be empty." })
  .max(128, { error: "Must be at most 128 characters." })
  .refine((s) => !/[+#/\u0000]/.test(s), { error: 'Must be a single MQTT topic level: no "/", "+", "#".' })
  .refine((s) => !s.startsWith("$"), { error: 'Must not start with "$" (reserved by brokers for $SYS topics).' });

const mqttUrl = z.string().superRefine((raw, ctx) => {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    ctx.addIssue({ code: "custom", message: `"${raw}" is not a URL; write it as mqtt://host:1883 or mqtts://host:8883.` });
    return;
  }
  if (url.protocol !== "mqtt:" && url.protocol !== "mqtts:") {
    ctx.addIssue({ code: "custom", message: `Must start with mqtt:// or mqtts://, e.g. mqtt://${raw.replace(/^[a-z]+:\/\//, "")}.` });
    return;
  }
  if (url.hostname === "") {
    ctx.addIssue({ code: "custom", message: "Must name the broker's host, e.g. mqtt://broker.local:1883." });
  }
  if (url.username !== "" || url.password !== "") {
    ctx.addIssue({
      code: "custom",
      message: "Must not contain credentials; use mqtt.username and mqtt.password or mqtt.passwordFile instead.",
    });
  }
  if ((url.pathname !== "" && url.pathname !== "/") || url.search !== "" || url.hash !== "") {
    ctx.addIssue({ code: "custom", message: "Must be only scheme, host and port, e.g. mqtts://broker.local:8883." });
  }
});

const tls = z
  .strictObject({
    /** PEM file with the CA(s) that signed the broker's certificate; default: the system's CAs. */
    caFile: text("path of the CA certificate file").optional(),
    /** Client certificate and key (PEM) for brokers that authenticate clients by certificate. */
    certFile: text("path of the client certificate file").optional(),
    keyFile: text("path of the client key file").optional(),
    rejectUnauthorized: z.boolean().default(true),
  })
  .superRefine((t, ctx) => {
    if ((t.certFile === undefined) !== (t.keyFile === undefined)) {
      const missing = t.certFile === undefined ? "certFile" : "keyFile";
      ctx.addIssue({ code: "custom", path: [missing], message: "certFile and keyFile go together: give both or neither." });
    }
  }, ALWAYS);

const mqtt = z
  .strictObject({
    url: mqttUrl,
    /** Default: `fencegate-<gatewayId>`. Two clients with one id knock each other off the broker. */
    clientId: text("MQTT client id", 128).optional(),
    /** 5 (default; replies use v5 response topics when the request has one) or 4 (3.1.1). */
    protocolVersion: z.union([z.literal(5), z.literal(4)]).default(5),
    baseTopic: topicLevel.default("fencegate"),
    username: text("MQTT user name", 256).optional(),
    password: text("MQTT password", 1024).optional(),
    /** A file holding only the password; relative to the configuration file's directory. */
    passwordFile: text("path of the password file").optional(),
    tls: tls.optional(),
    /** Allow a username or password over plain mqtt://. Only for a trusted, isolated network. */
    allowCleartextCredentials: z.boolean().default(false),
    keepaliveS: intIn(5, 3600, " of seconds").default(30),
    reconnect: backoff({ minMs: 1000, maxMs: 30_000 }),
    /** Larger requests are refused with INVALID_REQUEST. The API's contract is 16 KiB. */
    maxPayloadBytes: intIn(1024, 1_048_576, " of bytes").default(16_384),
    /**
     * The rate budgets of everyone's requests but the live lease holder's, per actuator
     * (docs/mqtt-api.md): per requester (its holder) and all together. Over them, OVERLOADED.
     */
    requestBudget: z
      .strictObject({
        perRequesterPerS: intIn(1, 1_000_000, " of requests a second").default(50),
        perRequesterBurst: intIn(1, 1_000_000, " of requests").default(100),
        perActuatorPerS: intIn(1, 1_000_000, " of requests a second").default(500),
        perActuatorBurst: intIn(1, 1_000_000, " of requests").default(1000),
      })
      .prefault({}),
  })
  .superRefine((m, ctx) => {
    const hasPassword = m.password !== undefined || m.passwordFile !== undefined;
    if (m.password !== undefined && m.passwordFile !== undefined) {
      ctx.addIssue({ code: "custom", path: ["passwordFile"], message: "Give either password or passwordFile, not both." });
    }
    const scheme = typeof m.url === "string" ? m.url.split(":", 1)[0]?.toLowerCase() : undefined;
    if (scheme === "mqtt" && (hasPassword || m.username !== undefined) && m.allowCleartextCredentials !== true) {
      ctx.addIssue({
        code: "custom",
        path: ["url"],
        message:
          "Credentials would cross the network unencrypted over mqtt://; use mqtts:// or, on a trusted isolated network only, set allowCleartextCredentials: true.",
      });
    }
    if (scheme === "mqtt" && m.tls !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["tls"],
        message: "TLS settings have no effect with an mqtt:// url; use mqtts:// or remove tls.",
      });
    }
    if (m.protocolVersion === 4 && hasPassword && m.username === undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["username"],
        message: "MQTT 3.1.1 (protocolVersion 4) cannot send a password without a username; add username.",
      });
    }
  }, ALWAYS);

// ---------------------------------------------------------------------------------------
// Buses

export const BAUD_RATES = [1200, 2400, 4800, 9600, 19_200, 38_400, 57_600, 115_200] as const;

const baudRate = z.number().refine((n) => (BAUD_RATES as readonly number[]).includes(n), {
  error: `Must be one of the standard rates: ${BAUD_RATES.join(", ")}.`,
});

const rtuBus = z.strictObject({
  type: z.literal("rtu"),
  /** The serial device. Prefer /dev/serial/by-id/...: it survives re-plugging and reboots. */
  path: text("serial device path, e.g. /dev/serial/by-id/usb-FTDI_...-if00-port0"),
  baudRate: baudRate.default(19_200),
  /** Modbus RTU default framing is 8E1: even parity. */
  parity: z.enum(["none", "even", "odd"]).default("even"),
  stopBits: z.union([z.literal(1), z.literal(2)]).default(1),
  dataBits: z.literal(8, { error: "Modbus RTU always uses 8 data bits." }).default(8),
  /** How long to wait for a reply before the transaction is a timeout. */
  timeoutMs: ms(10, 60_000).default(DEFAULT_BUS_TIMEOUT_MS),
  /** Extra silence between frames, for slow devices; default: the line's t3.5 only. */
  interFrameDelayMs: ms(0, 1000).optional(),
  /** Re-opening the port after it fails or disappears (a USB adapter unplugged). */
  reconnect: backoff({ minMs: 500, maxMs: 30_000 }),
});

const tcpBus = z.strictObject({
  type: z.literal("tcp"),
  host: text("device or Modbus TCP gateway host name or address", 253),
  port: intIn(1, 65_535).default(502),
  timeoutMs: ms(10, 60_000).default(DEFAULT_BUS_TIMEOUT_MS),
  reconnect: backoff({ minMs: 500, maxMs: 30_000 }),
});

const bus = z.discriminatedUnion("type", [rtuBus, tcpBus]);

/**
 * How long a bus stays silent after a timeout before it sends again, so a late answer is
 * not taken for the next one's: half the timeout, at least 20 ms.
 */
export function quietAfterTimeoutMs(timeoutMs: number): number {
  return Math.max(20, timeoutMs / 2);
}

const buses = z.record(id("bus name"), bus).superRefine((all, ctx) => {
  if (!isRecord(all)) return;
  const byPath = new Map<string, string>();
  for (const [name, b] of Object.entries(all)) {
    if (!isRecord(b) || b.type !== "rtu" || typeof b.path !== "string") continue;
    const other = byPath.get(b.path);
    if (other !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: [name, "path"],
        message: `Serial port "${b.path}" is already used by bus "${other}"; put all units on that port under one bus.`,
      });
    } else byPath.set(b.path, name);
  }
  if (Object.keys(all).length === 0) {
    ctx.addIssue({ code: "custom", message: "Define at least one bus." });
  }
}, ALWAYS);

// ---------------------------------------------------------------------------------------
// Points and actuators

/** Registers a value of this type occupies. */
function registerCount(type: PointType): 1 | 2 {
  return type === "u16" || type === "i16" ? 1 : 2;
}

/** The raw range of the integer types; f32 is unbounded here (its limits are min/max). */
const RAW_RANGE: Record<PointType, readonly [number, number]> = {
  u16: [0, 0xffff],
  i16: [-0x8000, 0x7fff],
  u32: [0, 0xffff_ffff],
  i32: [-0x8000_0000, 0x7fff_ffff],
  f32: [-3.4028234663852886e38, 3.4028234663852886e38],
};

/** The engineering-unit range a point of this type and scale can represent. */
function representableRange(type: PointType, scale: number): readonly [number, number] {
  const [lo, hi] = RAW_RANGE[type];
  return type === "f32" ? [lo, hi] : [round(lo * scale), round(hi * scale)];
}

/** Removes binary float noise, so 65535 * 0.01 reads 655.35. */
function round(x: number): number {
  return Number.parseFloat(x.toPrecision(12));
}

const point = z
  .strictObject({
    /** 0-based register address (as on the wire), not the 40001-style number. */
    register: intIn(0, 65_535),
    /** holding (FC03 read, FC06/FC16 write) or input (FC04, read-only). */
    table: z.enum(["holding", "input"]).default("holding"),
    type: z.enum(POINT_TYPES).default("u16"),
    /** For 32-bit types: which register holds the high word. "big": the first. */
    wordOrder: z.enum(["big", "little"]).default("big"),
    /** value = raw * scale, e.g. 0.01 for a percentage sent as hundredths. */
    scale: z
      .number()
      .refine((n) => Number.isFinite(n) && n > 0, { error: "Must be a number greater than 0 (value = raw × scale)." })
      .default(1),
    /** Limits in engineering units; a command outside them is refused with OUT_OF_RANGE. */
    min: z.number().refine(Number.isFinite, { error: "Must be a finite number." }).optional(),
    max: z.number().refine(Number.isFinite, { error: "Must be a finite number." }).optional(),
    writable: z.boolean().default(false),
    /** For display only, e.g. "%", "°C", "Pa". */
    unit: z.string().max(16, { error: "Must be at most 16 characters." }).optional(),
  })
  .superRefine((p, ctx) => {
    const type = (POINT_TYPES as readonly unknown[]).includes(p.type) ? (p.type as PointType) : undefined;
    if (p.writable === true && p.table === "input") {
      ctx.addIssue({
        code: "custom",
        path: ["writable"],
        message: "Input registers cannot be written; use table: holding or set writable: false.",
      });
    }
    if (p.writable === true) {
      for (const bound of ["min", "max"] as const) {
        if (p[bound] === undefined) {
          ctx.addIssue({
            code: "custom",
            path: [bound],
            message: `A writable point needs ${bound}: the ${bound === "min" ? "lowest" : "highest"} value a controller may command.`,
          });
        }
      }
    }
    if (finite(p.min) && finite(p.max) && p.min > p.max) {
      ctx.addIssue({ code: "custom", path: ["max"], message: `Must be at least min (${p.min}).` });
    }
    if (type === "f32" && finite(p.scale) && p.scale !== 1) {
      ctx.addIssue({
        code: "custom",
        path: ["scale"],
        message: "An f32 register pair carries the engineering value itself and is never scaled; remove scale (or set 1).",
      });
    }
    const scaleFits =
      type === undefined || type === "f32" || !finite(p.scale) || p.scale <= 0 || representableRange(type, p.scale).every(Number.isFinite);
    if (!scaleFits) {
      ctx.addIssue({
        code: "custom",
        path: ["scale"],
        message: `A ${String(p.type)} with scale ${p.scale} overflows: its raw range times the scale is not a finite number; use a smaller scale.`,
      });
    }
    if (type !== undefined && type !== "f32" && finite(p.scale) && p.scale > 0 && scaleFits) {
      const [lo, hi] = representableRange(type, p.scale);
      for (const bound of ["min", "max"] as const) {
        const v = p[bound];
        if (finite(v) && (v < lo || v > hi)) {
          ctx.addIssue({
            code: "custom",
            path: [bound],
            message: `A ${type} with scale ${p.scale} can only hold ${lo} to ${hi}; change ${bound}, type or scale.`,
          });
        }
      }
    }
    if (type !== undefined && finite(p.register) && p.register + registerCount(type) - 1 > 65_535) {
      ctx.addIssue({ code: "custom", path: ["register"], message: `A ${type} takes two registers; the last one would be past 65535.` });
    }
  }, ALWAYS)
  .transform((p) => {
    const [lo, hi] = representableRange(p.type, p.scale);
    return { ...p, min: p.min ?? lo, max: p.max ?? hi };
  });

export type PointConfig = z.output<typeof point>;

const expiry = z
  .discriminatedUnion("policy", [
    /** On lease expiry, leave the device as the last command left it. */
    z.strictObject({ policy: z.literal("hold") }),
    /** On lease expiry, the gateway itself writes these values (fenced like any command). */
    z.strictObject({
      policy: z.literal("safe"),
      set: z.record(z.string(), z.number().refine(Number.isFinite, { error: "Must be a finite number." })),
    }),
  ])
  .prefault({ policy: "hold" });

const actuator = z
  .strictObject({
    /** The `A` in the MQTT topics: unique on this gateway. */
    id: id("actuator id"),
    /** The name of a bus under `buses`. */
    bus: z.string(),
    /** Modbus unit (slave) id on that bus. */
    unit: intIn(1, 247),
    /**
     * fenced: the firmware checks (token, seq) itself and refuses stale writes (DEVICE_REJECTED);
     * plain: an ordinary Modbus device, fenced by the gateway only.
     */
    profile: z.enum(["fenced", "plain"]),
    pollIntervalMs: ms(50, HOUR_MS).default(1000),
    points: z.record(
      z
        .string()
        .regex(CONFIGURED_POINT_NAME_PATTERN, { error: 'Point names are 1 to 64 letters, digits, "-" or "_", starting with a letter.' }),
      point,
    ),
    expiry,
    /**
     * Each grant carries a per-lease secret; commands, renewals and releases must carry an
     * HMAC-SHA256 of their fields with it (packages/protocol/src/signature.ts), or get BAD_SIGNATURE.
     */
    authenticatedCommands: z.boolean().default(false),
    /**
     * Plain profile: how one-register points are written. fc16 (Write Multiple Registers,
     * default) or fc06 (Write Single Register) for devices that lack FC16; two-register
     * points always take FC16. The fenced profile's command block is always one FC16.
     */
    writeFunction: z.enum(["fc16", "fc06"]).default("fc16"),
  })
  .superRefine((a, ctx) => {
    if (a.writeFunction === "fc06" && a.profile === "fenced") {
      ctx.addIssue({
        code: "custom",
        path: ["writeFunction"],
        message: "A fenced actuator's command block is always one FC16; writeFunction: fc06 is for plain devices only.",
      });
    }
    const points = isRecord(a.points) ? a.points : undefined;
    if (points !== undefined && Object.keys(points).length === 0) {
      ctx.addIssue({ code: "custom", path: ["points"], message: "An actuator needs at least one point." });
    }
    if (points !== undefined) checkRegisterOverlap(points, ctx);
    if (points !== undefined && isRecord(a.expiry) && a.expiry.policy === "safe" && isRecord(a.expiry.set)) {
      checkSafeValues(a.expiry.set, points, ctx);
    }
  }, ALWAYS);

type Ctx = z.core.$RefinementCtx<unknown>;

/** No two points of one actuator may share a register of the same table. */
function checkRegisterOverlap(points: Record<string, unknown>, ctx: Ctx): void {
  const seen: { name: string; table: unknown; first: number; last: number }[] = [];
  for (const [name, p] of Object.entries(points)) {
    if (!isRecord(p) || !finite(p.register)) continue;
    const type = (POINT_TYPES as readonly unknown[]).includes(p.type ?? "u16") ? ((p.type ?? "u16") as PointType) : "u16";
    const table = p.table ?? "holding";
    const first = p.register;
    const last = first + registerCount(type) - 1;
    const clash = seen.find((s) => s.table === table && s.first <= last && first <= s.last);
    if (clash) {
      const span = clash.first === clash.last ? `register ${clash.first}` : `registers ${clash.first}-${clash.last}`;
      ctx.addIssue({
        code: "custom",
        path: ["points", name, "register"],
        message: `Overlaps point "${clash.name}" (${table} ${span}); give each point its own registers.`,
      });
    }
    seen.push({ name, table, first, last });
  }
}

/** A safe expiry value must name a writable point and lie within its limits. */
function checkSafeValues(set: Record<string, unknown>, points: Record<string, unknown>, ctx: Ctx): void {
  const names = Object.keys(points);
  if (Object.keys(set).length === 0) {
    ctx.addIssue({
      code: "custom",
      path: ["expiry", "set"],
      message: "A safe expiry policy needs at least one point value; or use policy: hold.",
    });
  }
  for (const [name, value] of Object.entries(set)) {
    const path = ["expiry", "set", name];
    const p = points[name];
    if (!isRecord(p)) {
      const guess = closest(name, names);
      const hint = guess === undefined ? `points here: ${names.join(", ") || "none"}` : `did you mean "${guess}"?`;
      ctx.addIssue({ code: "custom", path, message: `No point "${name}" on this actuator (${hint}).` });
      continue;
    }
    if (p.writable !== true) {
      ctx.addIssue({ code: "custom", path, message: `Point "${name}" is read-only; the safe values can only set writable points.` });
      continue;
    }
    const limitsValid = !(finite(p.min) && finite(p.max) && p.min > p.max); // else reported at the point
    if (limitsValid && finite(value) && ((finite(p.min) && value < p.min) || (finite(p.max) && value > p.max))) {
      ctx.addIssue({ code: "custom", path, message: `Must lie within the point's limits, ${String(p.min)} to ${String(p.max)}.` });
    }
  }
}

// ---------------------------------------------------------------------------------------
// Leases, commands and the rest

const leases = z
  .strictObject({
    minTtlMs: ms(100, HOUR_MS).default(1000),
    maxTtlMs: ms(100, HOUR_MS).default(300_000),
    /** Advertised to controllers as a sensible ttlMs; each acquire still names its own. */
    defaultTtlMs: ms(100, HOUR_MS).default(10_000),
  })
  .superRefine((l, ctx) => {
    if (finite(l.minTtlMs) && finite(l.maxTtlMs) && l.minTtlMs > l.maxTtlMs) {
      ctx.addIssue({ code: "custom", path: ["maxTtlMs"], message: `Must be at least minTtlMs (${l.minTtlMs}).` });
    }
    if (finite(l.defaultTtlMs) && finite(l.minTtlMs) && l.defaultTtlMs < l.minTtlMs) {
      ctx.addIssue({ code: "custom", path: ["defaultTtlMs"], message: `Must be at least minTtlMs (${l.minTtlMs}).` });
    } else if (finite(l.defaultTtlMs) && finite(l.maxTtlMs) && l.defaultTtlMs > l.maxTtlMs) {
      ctx.addIssue({ code: "custom", path: ["defaultTtlMs"], message: `Must be at most maxTtlMs (${l.maxTtlMs}).` });
    }
  }, ALWAYS)
  .prefault({});

const commands = z
  .strictObject({
    /** How long a command may wait before DEADLINE_EXCEEDED, when the request gives no deadlineMs. */
    defaultDeadlineMs: ms(10, HOUR_MS).default(DEFAULT_DEADLINE_MS),
    /** The largest deadlineMs a request may ask for. */
    maxDeadlineMs: ms(10, HOUR_MS).default(60_000),
    /**
     * The gateway's own safe-value write (expiry policy "safe") is retried until the device
     * confirms it or a newer lease supersedes it: after minMs, doubling up to maxMs between attempts.
     */
    safeWriteRetry: backoff({ minMs: 250, maxMs: 10_000 }),
    /** Obsolete, accepted so that older files still load: the safe write no longer gives up at a deadline (safeWriteRetry). */
    safeWriteDeadlineMs: ms(10, HOUR_MS).optional(),
    /** Commands waiting behind the one at the device; beyond this: OVERLOADED. */
    queueLimit: intIn(1, 1024).default(16),
    /** Accepted commands remembered per actuator, to answer retries with DUPLICATE. */
    recentLimit: intIn(1, 10_000).default(64),
  })
  .superRefine((c, ctx) => {
    if (finite(c.defaultDeadlineMs) && finite(c.maxDeadlineMs) && c.defaultDeadlineMs > c.maxDeadlineMs) {
      ctx.addIssue({ code: "custom", path: ["defaultDeadlineMs"], message: `Must be at most maxDeadlineMs (${c.maxDeadlineMs}).` });
    }
  }, ALWAYS)
  .prefault({});

const journal = z
  .strictObject({
    /** The SQLite journal; relative to the configuration file's directory. */
    path: text("journal file path").default("/var/lib/fencegate/journal.db"),
    /**
     * Start a fresh journal when none is there. Off: a missing journal (an unmounted disk)
     * stops the daemon, and `fencegate journal init` creates one (docs/deploy.md §7). Only the
     * embedded demo configuration sets it.
     */
    createIfMissing: z.boolean().default(false),
    /**
     * With several actuators busy, how long a commit that finds the disk idle may wait for
     * their records to share its fdatasync; at most half the recent fdatasync time.
     */
    gatherMaxMs: ms(0, 50).default(2),
    /**
     * Commands' records (intent, outcome) are an audit trail committed in the background: a
     * record waits at most auditLagMs, or until auditLagRecords are waiting, for its commit.
     * What a crash can lose is at most that much of the trail (never a grant).
     */
    auditLagMs: ms(1, 5_000).default(200),
    auditLagRecords: intIn(1, 100_000).default(256),
    /** Records not yet durable at which new commands are refused (OVERLOADED) until the disk catches up. */
    auditQueueLimit: intIn(16, 1_000_000).default(8192),
    /** A commit not durable this long after it was sent means a stalled disk: the daemon stops (exit 74). */
    commitStallMs: ms(100, 600_000).default(10_000),
  })
  .superRefine((j, ctx) => {
    if (finite(j.auditLagRecords) && finite(j.auditQueueLimit) && j.auditLagRecords > j.auditQueueLimit) {
      ctx.addIssue({
        code: "custom",
        path: ["auditLagRecords"],
        message: `Must be at most auditQueueLimit (${j.auditQueueLimit}): a commit must start before new commands are refused.`,
      });
    }
    if (finite(j.auditLagMs) && finite(j.commitStallMs) && j.auditLagMs >= j.commitStallMs) {
      ctx.addIssue({ code: "custom", path: ["auditLagMs"], message: `Must be below commitStallMs (${j.commitStallMs}).` });
    }
  }, ALWAYS)
  .prefault({});

const logging = z
  .strictObject({
    level: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
  })
  .prefault({});

/** Credentials for the HTTP port: a token, or a user name and password. */
const httpAuth = z
  .strictObject({
    /** Prometheus sends it as `Authorization: Bearer <token>`; a browser takes it as the password. */
    token: z
      .string()
      .min(16, { error: "Must be at least 16 characters: it is all that stands between the network and the page." })
      .max(1024, { error: "Must be at most 1024 characters." })
      .optional(),
    /** A file holding only the token; relative to the configuration file's directory. */
    tokenFile: text("path of the token file").optional(),
    username: z
      .string()
      .regex(/^[^:\s]{1,64}$/, { error: 'Must be 1 to 64 characters without ":" or spaces.' })
      .optional(),
    password: z
      .string()
      .min(12, { error: "Must be at least 12 characters." })
      .max(1024, { error: "Must be at most 1024 characters." })
      .optional(),
    /** A file holding only the password; relative to the configuration file's directory. */
    passwordFile: text("path of the password file").optional(),
  })
  .superRefine((a, ctx) => {
    const token = a.token !== undefined || a.tokenFile !== undefined;
    const password = a.password !== undefined || a.passwordFile !== undefined;
    if (a.token !== undefined && a.tokenFile !== undefined)
      ctx.addIssue({ code: "custom", path: ["tokenFile"], message: "Give either token or tokenFile, not both." });
    if (a.password !== undefined && a.passwordFile !== undefined)
      ctx.addIssue({ code: "custom", path: ["passwordFile"], message: "Give either password or passwordFile, not both." });
    if (token && (password || a.username !== undefined))
      ctx.addIssue({ code: "custom", message: "Give either a token or a username and password, not both." });
    else if (!token && !(password && a.username !== undefined)) {
      ctx.addIssue({ code: "custom", message: "Give a token (or tokenFile), or a username with a password (or passwordFile)." });
    }
  }, ALWAYS);

/** 127.0.0.0/8, ::1 (also bracketed or IPv4-mapped) and localhost: reachable from this machine only. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, "$1");
  return h === "localhost" || h === "::1" || /^127(\.\d{1,3}){3}$/.test(h) || /^::ffff:127(\.\d{1,3}){3}$/.test(h);
}

const metrics = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** Prometheus scrape endpoint, /healthz and the status page; loopback by default. */
    host: text("address to listen on", 253).default("127.0.0.1"),
    port: intIn(1, 65_535).default(9464),
    /** The live status page at / on this port (read-only). */
    statusPage: z
      .strictObject({
        enabled: z.boolean().default(true),
        /** Live feeds (browser tabs) served at once; past it a new one is refused with 503. */
        maxEventStreams: intIn(1, 256).default(16),
      })
      .prefault({}),
    /** Credentials every request must carry; what lets the port leave loopback with the status page on. */
    auth: httpAuth.optional(),
    /**
     * Without credentials, the endpoint tells whoever reaches it the actuator ids, error rates
     * and bus states: another address than loopback takes this explicit choice, and the status
     * page off.
     */
    allowNonLoopback: z.boolean().default(false),
    /**
     * Host names the port answers for besides IP addresses, `localhost` and `host` (a name
     * that reaches it through DNS or a proxy); any other `Host` gets 421: DNS rebinding.
     */
    hostNames: z
      .array(
        z.string().regex(/^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/, {
          error: "Must be a host name: letters, digits, '.' and '-', at most 253 characters.",
        }),
      )
      .max(32, { error: "At most 32 host names." })
      .default([]),
  })
  .superRefine((m, ctx) => {
    if (typeof m.host !== "string" || isLoopbackHost(m.host) || m.enabled === false || m.auth !== undefined) return;
    if (m.allowNonLoopback !== true) {
      ctx.addIssue({
        code: "custom",
        path: ["host"],
        message: `${m.host} would serve the status page and /metrics (actuator ids, holders, error rates, bus states) without authentication beyond this machine: add metrics.auth (a token, or a username and password), or keep 127.0.0.1 and use a tunnel or proxy; without credentials, only with metrics.statusPage.enabled: false and metrics.allowNonLoopback: true, on a network you trust.`,
      });
    } else if (m.statusPage?.enabled !== false) {
      ctx.addIssue({
        code: "custom",
        path: ["host"],
        message: `The status page would be open to anyone who reaches ${m.host}: add metrics.auth (a token, or a username and password), or set metrics.statusPage.enabled: false to serve only /metrics and /healthz there.`,
      });
    }
  }, ALWAYS)
  .prefault({});

const shutdown = z
  .strictObject({
    /** On SIGTERM: how long to let queued and in-flight commands finish before exiting. */
    drainTimeoutMs: ms(0, 60_000).default(5000),
  })
  .prefault({});

// ---------------------------------------------------------------------------------------
// Gateway group (hot standby on etcd)

const etcdUrl = z.string().superRefine((raw, ctx) => {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    ctx.addIssue({
      code: "custom",
      message: `"${raw}" is not a URL; write it as https://host:2379 (or http:// on a trusted isolated network).`,
    });
    return;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    ctx.addIssue({
      code: "custom",
      message: `Must start with https:// or http://, e.g. https://${raw.replace(/^[a-z]+:\/\//, "")}; etcd's client port speaks HTTP.`,
    });
    return;
  }
  if (url.hostname === "") ctx.addIssue({ code: "custom", message: "Must name the etcd member's host, e.g. https://etcd-1.local:2379." });
  if (url.username !== "" || url.password !== "")
    ctx.addIssue({ code: "custom", message: "Must not contain credentials; use group.username and group.password or group.passwordFile." });
  if ((url.pathname !== "" && url.pathname !== "/") || url.search !== "" || url.hash !== "")
    ctx.addIssue({ code: "custom", message: "Must be only scheme, host and port, e.g. https://etcd-1.local:2379." });
});

/**
 * Off when absent: a single gateway needs no etcd. With it, two or more gateways with the
 * same actuators form a group: one is active, the others stand by (docs/gateway-group.md).
 */
const group = z
  .strictObject({
    /** Names the group's keys in etcd (`/fencegate/<name>/...`): the same on every gateway of the group. */
    name: id("group name"),
    /** Every etcd member's client URL; three members (two gateways and a witness) survive the loss of one. */
    endpoints: z.array(etcdUrl).min(1, { error: "Give at least one etcd endpoint (three members: two gateways and a witness)." }).max(9),
    tls: tls.optional(),
    username: text("etcd user name", 256).optional(),
    password: text("etcd password", 1024).optional(),
    /** A file holding only the password; relative to the configuration file's directory. */
    passwordFile: text("path of the etcd password file").optional(),
    /** Allow a password over plain http://. Only for a trusted, isolated network. */
    allowCleartextCredentials: z.boolean().default(false),
    /** The etcd lease behind the leader key, in whole seconds: failover takes about this long. */
    leaseTtlMs: ms(2000, 60_000)
      .refine((n) => n % 1000 === 0, { error: "Must be whole seconds (a multiple of 1000): etcd leases count in seconds." })
      .default(7000),
    /** The active gateway stops all device I/O this long before its etcd lease can have expired. */
    selfFenceMarginMs: ms(100, 30_000).default(1000),
    /** One etcd request, over every endpoint it tries. */
    requestTimeoutMs: ms(100, 10_000).default(1000),
    /** The etcd members' --election-timeout (etcd's default 1000): the lease must outlast an election (see below). */
    etcdElectionTimeoutMs: ms(50, 50_000).default(1000),
    /**
     * Plain (unfenced) devices in a group are protected only by the deposed gateway's
     * self-fencing, which rests on timing; they are refused unless this says the operator accepts it.
     */
    acceptPlainDevices: z.boolean().default(false),
  })
  .superRefine((g, ctx) => {
    if (g.password !== undefined && g.passwordFile !== undefined) {
      ctx.addIssue({ code: "custom", path: ["passwordFile"], message: "Give either password or passwordFile, not both." });
    }
    const hasPassword = g.password !== undefined || g.passwordFile !== undefined;
    if (hasPassword && g.username === undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["username"],
        message: "etcd authentication needs a user name with the password; add username.",
      });
    }
    if (g.username !== undefined && !hasPassword) {
      ctx.addIssue({
        code: "custom",
        path: ["password"],
        message: "etcd authentication needs a password with the user name; add password or passwordFile.",
      });
    }
    const endpoints = Array.isArray(g.endpoints) ? g.endpoints.filter((e): e is string => typeof e === "string") : [];
    const schemes = new Set(
      endpoints.map((e) => e.split(":", 1)[0]?.toLowerCase()).filter((scheme) => scheme === "http" || scheme === "https"),
    );
    if (schemes.size > 1) {
      ctx.addIssue({ code: "custom", path: ["endpoints"], message: "Use one scheme for every endpoint: all https:// or all http://." });
    }
    if (schemes.has("http") && (hasPassword || g.username !== undefined) && g.allowCleartextCredentials !== true) {
      ctx.addIssue({
        code: "custom",
        path: ["endpoints"],
        message:
          "The etcd password would cross the network unencrypted over http://; use https:// or, on a trusted isolated network only, set allowCleartextCredentials: true.",
      });
    }
    if (schemes.has("http") && g.tls !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["tls"],
        message: "TLS settings have no effect with http:// endpoints; use https:// or remove tls.",
      });
    }
    if (finite(g.leaseTtlMs) && finite(g.selfFenceMarginMs) && g.selfFenceMarginMs * 2 > g.leaseTtlMs) {
      ctx.addIssue({
        code: "custom",
        path: ["selfFenceMarginMs"],
        message: `Must be at most half of leaseTtlMs (${g.leaseTtlMs}): after each renewal the active gateway may drive devices for leaseTtlMs - selfFenceMarginMs, and renewals come every third of the TTL.`,
      });
    }
    if (finite(g.leaseTtlMs) && finite(g.requestTimeoutMs) && g.requestTimeoutMs * 3 > g.leaseTtlMs) {
      ctx.addIssue({
        code: "custom",
        path: ["requestTimeoutMs"],
        message: `Must be at most a third of leaseTtlMs (${g.leaseTtlMs}), so a renewal that hangs leaves time for another before the lease runs out.`,
      });
    }
    if (
      finite(g.leaseTtlMs) &&
      finite(g.selfFenceMarginMs) &&
      finite(g.requestTimeoutMs) &&
      finite(g.etcdElectionTimeoutMs) &&
      g.leaseTtlMs % 1000 === 0 &&
      g.leaseTtlMs >= 2000 &&
      g.selfFenceMarginMs * 2 <= g.leaseTtlMs &&
      g.requestTimeoutMs * 3 <= g.leaseTtlMs
    ) {
      const hang = hangProblem(g.leaseTtlMs, g.selfFenceMarginMs, g.requestTimeoutMs, g.etcdElectionTimeoutMs);
      if (hang !== null) ctx.addIssue({ code: "custom", path: ["leaseTtlMs"], message: hang });
    }
  }, ALWAYS);

/**
 * Why these settings cannot ride out a hung etcd leader, or null when they can: the active
 * gateway would step down (and `expiry: safe` drive the valves to their safe values) at every
 * leader freeze. src/core/leadership.ts leaderHangRoomMs; docs/gateway-group.md.
 */
function hangProblem(ttlMs: number, marginMs: number, requestTimeoutMs: number, electionTimeoutMs: number): string | null {
  const config = leadershipConfig(ttlMs, marginMs);
  if (leaderHangRoomMs(config, requestTimeoutMs, electionTimeoutMs) > 0) return null;
  let fits = ttlMs + 1000;
  while (fits <= 60_000 && leaderHangRoomMs(leadershipConfig(fits, marginMs), requestTimeoutMs, electionTimeoutMs) <= 0) fits += 1000;
  const raise = fits <= 60_000 ? `raise leaseTtlMs to ${fits} or more` : "lower requestTimeoutMs or etcdElectionTimeoutMs";
  return (
    `leaseTtlMs ${ttlMs} - selfFenceMarginMs ${marginMs} - the renewal period ${config.renewEveryMs} (a third of the TTL) = ${ttlMs - marginMs - config.renewEveryMs} ms must be more than ` +
    `2 x etcdElectionTimeoutMs ${electionTimeoutMs} + requestTimeoutMs ${requestTimeoutMs} = ${2 * electionTimeoutMs + requestTimeoutMs} ms: otherwise an etcd leader that hangs (a frozen VM, a partition) makes the active gateway step down before etcd has elected another. ` +
    `Set etcdElectionTimeoutMs to the members' --election-timeout, then ${raise} (docs/gateway-group.md, "When etcd is in trouble").`
  );
}

// ---------------------------------------------------------------------------------------
// The whole file

export const gatewayConfigSchema = z
  .strictObject({
    /** This gateway's name: the `<gatewayId>` in `B/gateway/<gatewayId>/status`. */
    gatewayId: id("gateway id"),
    mqtt,
    buses,
    actuators: z.array(actuator).min(1, { error: "Define at least one actuator." }),
    leases,
    commands,
    journal,
    logging,
    metrics,
    shutdown,
    group: group.optional(),
  })
  .superRefine(checkReferences, ALWAYS)
  .superRefine(checkGroupDevices, ALWAYS)
  .transform((c) => ({
    ...c,
    mqtt: { ...c.mqtt, clientId: c.mqtt.clientId ?? `fencegate-${c.gatewayId}` },
  }));

/**
 * Where a bus reaches its devices: a Modbus TCP host and port, the same for every spelling
 * of the host that needs no name lookup (case, a trailing dot, IPv6 brackets). Two buses
 * with one endpoint are two connections to the same devices (fine, for different units).
 */
export function tcpEndpoint(host: string, port: number): string {
  return `${host
    .toLowerCase()
    .replace(/^\[(.*)\]$/, "$1")
    .replace(/\.$/, "")}:${port}`;
}

/**
 * A bus's timeout, and the silence after it, must fit within the deadlines of the commands
 * it carries: otherwise one unanswered request makes every command queued behind it miss
 * its deadline (timeoutMs 60000 with defaultDeadlineMs 10: the bus then waits 30 s).
 */
function checkTimeoutsFitDeadlines(root: Record<string, unknown>, ctx: Ctx): void {
  if (!isRecord(root.buses)) return;
  const commands = isRecord(root.commands) ? root.commands : {};
  // The safe write has no deadline: it is retried until the device confirms it.
  const deadlines = [["defaultDeadlineMs", commands.defaultDeadlineMs ?? DEFAULT_DEADLINE_MS]] as const;
  for (const [name, b] of Object.entries(root.buses)) {
    if (!isRecord(b)) continue;
    const timeoutMs = b.timeoutMs ?? DEFAULT_BUS_TIMEOUT_MS;
    if (!finite(timeoutMs)) continue;
    const busyMs = timeoutMs + quietAfterTimeoutMs(timeoutMs);
    for (const [deadline, ms] of deadlines) {
      if (finite(ms) && busyMs > ms) {
        const largest = ms >= 60 ? Math.floor((ms * 2) / 3) : ms - 20; // t + max(20, t/2) <= ms
        const fix = largest >= 10 ? `lower timeoutMs to at most ${largest} or raise ${deadline}` : `raise ${deadline}`;
        ctx.addIssue({
          code: "custom",
          path: ["buses", name, "timeoutMs"],
          message: `timeoutMs ${timeoutMs} and the ${quietAfterTimeoutMs(timeoutMs)} ms of silence after a timeout exceed commands.${deadline} (${ms}): every command queued behind one unanswered request would miss its deadline; ${fix}.`,
        });
        break;
      }
    }
  }
}

/** Actuators against buses and each other: ids unique, buses exist, units unique per bus and per TCP endpoint. */
function checkReferences(root: unknown, ctx: Ctx): void {
  if (!isRecord(root)) return;
  checkTimeoutsFitDeadlines(root, ctx);
  if (!Array.isArray(root.actuators)) return;
  const buses = isRecord(root.buses) ? root.buses : undefined;
  const busNames = buses === undefined ? [] : Object.keys(buses);
  const ids = new Map<string, number>();
  const units = new Map<string, number>();
  const atEndpoint = new Map<string, number>();
  root.actuators.forEach((a: unknown, i: number) => {
    if (!isRecord(a)) return;
    if (typeof a.id === "string") {
      const previous = ids.get(a.id);
      if (previous !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["actuators", i, "id"],
          message: `Actuator id "${a.id}" is already used by actuators[${previous}]; ids must be unique.`,
        });
      } else ids.set(a.id, i);
      if (RESERVED_ACTUATOR_IDS.includes(a.id)) {
        ctx.addIssue({
          code: "custom",
          path: ["actuators", i, "id"],
          message: `"${a.id}" is reserved (its topics would collide with the gateway status topic); choose another id.`,
        });
      }
    }
    if (typeof a.bus !== "string" || buses === undefined) return;
    if (!Object.hasOwn(buses, a.bus)) {
      const guess = closest(a.bus, busNames);
      const hint = guess === undefined ? `buses defined: ${busNames.join(", ") || "none"}` : `did you mean "${guess}"?`;
      ctx.addIssue({ code: "custom", path: ["actuators", i, "bus"], message: `No bus named "${a.bus}" under buses (${hint}).` });
      return;
    }
    if (!Number.isInteger(a.unit)) return;
    const key = `${a.bus}\u0000${String(a.unit)}`;
    const previous = units.get(key);
    if (previous !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["actuators", i, "unit"],
        message: `Unit ${String(a.unit)} on bus "${a.bus}" is already used by actuators[${previous}]; each device on a bus needs its own unit id.`,
      });
      return;
    }
    units.set(key, i);
    // Two buses to one Modbus TCP endpoint reach the same units: one device, two actuators,
    // two lease tables, two fences, and both controllers' commands at the one device.
    const bus = buses[a.bus];
    if (!isRecord(bus) || bus.type !== "tcp" || typeof bus.host !== "string") return;
    const endpoint = tcpEndpoint(bus.host, typeof bus.port === "number" ? bus.port : 502);
    const other = atEndpoint.get(`${endpoint}\u0000${String(a.unit)}`);
    if (other !== undefined) {
      const first = (root.actuators as Record<string, unknown>[])[other]!;
      ctx.addIssue({
        code: "custom",
        path: ["actuators", i, "unit"],
        message: `Unit ${String(a.unit)} at ${endpoint} is already actuators[${other}] (bus "${String(first.bus)}"): buses "${String(first.bus)}" and "${a.bus}" reach the same device there. Give each device one actuator, on one bus.`,
      });
    } else atEndpoint.set(`${endpoint}\u0000${String(a.unit)}`, i);
  });
}

/** In a group, plain devices only with the operator's explicit acceptance. */
function checkGroupDevices(root: unknown, ctx: Ctx): void {
  if (!isRecord(root) || !isRecord(root.group) || root.group.acceptPlainDevices === true || !Array.isArray(root.actuators)) return;
  root.actuators.forEach((a: unknown, i: number) => {
    if (!isRecord(a) || a.profile !== "plain") return;
    ctx.addIssue({
      code: "custom",
      path: ["actuators", i, "profile"],
      message:
        "A plain device in a gateway group is protected only by the deposed gateway's self-fencing, which rests on timing (a paused gateway could write once more after the takeover); use a fenced device, or set group.acceptPlainDevices: true if you accept that.",
    });
  });
}

/** The configuration as parsed, with every default applied. */
export type GatewayConfig = z.output<typeof gatewayConfigSchema>;
export type MqttConfig = GatewayConfig["mqtt"];
export type BusConfig = GatewayConfig["buses"][string];
export type RtuBusConfig = Extract<BusConfig, { type: "rtu" }>;
export type TcpBusConfig = Extract<BusConfig, { type: "tcp" }>;
export type ActuatorEntry = GatewayConfig["actuators"][number];
export type GroupConfig = NonNullable<GatewayConfig["group"]>;
