/**
 * The status page's routes on the daemon's HTTP port, all read-only (GET):
 *
 *   /, /status.js, /status.css        the page (plain files, no build step, no external asset)
 *   /api/status                       everything the page draws, as JSON
 *   /api/events                       server-sent events: decisions, changed actuators, the gateway line
 *   /api/actuators/<id>/audit         one page of an actuator's audit trail from the journal
 *
 * Bounded: at most `maxEventStreams` event streams (503 past it, saying so); a stream
 * whose client reads slower than the gateway writes is closed once `maxStreamBufferBytes`
 * wait for it (the page reconnects and reloads its state), so a slow phone never grows
 * the daemon's memory. Changes are batched: one write per stream per `flushMs` whatever the
 * command rate, so open pages cost commands almost nothing. Query parameters are checked
 * one by one; a page of the audit trail holds at most MAX_PAGE entries.
 */
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import * as z from "zod";
import { AuditError, OUTCOME_FILTERS, type AuditReader } from "../journal/audit.ts";
import { ACTUATOR_PATTERN, HOLDER_PATTERN } from "../../../packages/protocol/src/index.ts";
import type { ApiError, AuditAnswer, Decision, StatusBody, StatusEvents, StreamCounts } from "./status-api.ts";
import { FEED_LIMIT, type StatusBoard } from "./status-board.ts";

/** The largest page of the audit trail the page may ask for. */
const MAX_PAGE = 100;
const DEFAULT_PAGE = 25;
const MAX_SINCE_CHARS = 40;

/**
 * Beside this code: src/adapters/http/status-page from the sources, dist/status-page from the
 * build (bin/build.mjs copies it there; the package ships no src/).
 */
const PAGE_DIR = join(import.meta.dirname, "status-page");

export interface StatusRoutesOptions {
  readonly board: StatusBoard;
  /** Opens the audit trail's reader (once, on first use). */
  readonly openAudit: () => AuditReader;
  /** Resolves when every record handed to the journal so far is durable: nothing is shown before. */
  readonly whenDurable: () => Promise<void>;
  readonly maxEventStreams: number;
  readonly maxStreamBufferBytes?: number;
  readonly flushMs?: number;
  readonly gatewayEveryMs?: number;
}

interface Asset {
  readonly type: string;
  readonly body: Buffer;
  readonly gzip: Buffer;
  readonly etag: string;
}

const SECURITY_HEADERS = {
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
};
/** The page may talk to the gateway it came from, and to nothing else. */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** Reads the page's files once; throws with a sentence if the installation lacks them. */
function loadPageAssets(dir = PAGE_DIR): ReadonlyMap<string, Asset> {
  const files: [path: string, file: string, type: string][] = [
    ["/", "index.html", "text/html; charset=utf-8"],
    ["/status.js", "status.js", "text/javascript; charset=utf-8"],
    ["/status.css", "status.css", "text/css; charset=utf-8"],
  ];
  const assets = new Map<string, Asset>();
  for (const [path, file, type] of files) {
    let body: Buffer;
    try {
      body = readFileSync(join(dir, file));
    } catch (err) {
      throw new Error(
        `The status page's file ${join(dir, file)} cannot be read (${(err as Error).message}); reinstall fencegate, or set metrics.statusPage.enabled: false.`,
      );
    }
    assets.set(path, { type, body, gzip: gzipSync(body, { level: 9 }), etag: `"${body.length.toString(16)}-${hash(body)}"` });
  }
  return assets;
}

function hash(b: Buffer): string {
  let h = 2166136261;
  for (const byte of b) h = Math.imul(h ^ byte, 16777619) >>> 0;
  return h.toString(16);
}

export class StatusRoutes {
  private readonly assets = loadPageAssets();
  private readonly streams: EventStreams;
  private audit: AuditReader | null = null;

  constructor(private readonly options: StatusRoutesOptions) {
    this.streams = new EventStreams(options);
  }

  /** Serves `url` if it is one of the page's; false when it is not (the caller answers 404). */
  handle(req: IncomingMessage, res: ServerResponse, url: URL): boolean {
    const asset = this.assets.get(url.pathname);
    const audit = /^\/api\/actuators\/([^/]*)\/audit$/.exec(url.pathname);
    if (asset === undefined && audit === null && url.pathname !== "/api/status" && url.pathname !== "/api/events") return false;
    if (audit !== null) {
      void this.serveAudit(res, decodeSegment(audit[1]!), url.searchParams);
    } else if (url.search !== "") {
      fail(res, 400, "INVALID_REQUEST", `${url.pathname} takes no query parameters.`);
    } else if (asset !== undefined) {
      this.serveAsset(req, res, asset);
    } else if (url.pathname === "/api/status") {
      json(res, 200, { ...this.options.board.snapshot(), streams: this.streams.counts() } satisfies StatusBody);
    } else {
      this.streams.open(req, res);
    }
    return true;
  }

  /** Open event streams, and how many were closed for reading too slowly. */
  get streamCounts(): StreamCounts {
    return this.streams.counts();
  }

  /** Ends every event stream (before the server closes: they would hold it open) and the reader. */
  close(): void {
    this.streams.close();
    this.audit?.close();
    this.audit = null;
  }

  private serveAsset(req: IncomingMessage, res: ServerResponse, asset: Asset): void {
    const headers: Record<string, string> = {
      ...SECURITY_HEADERS,
      "content-type": asset.type,
      "cache-control": "no-cache",
      etag: asset.etag,
      "content-security-policy": CSP,
      vary: "accept-encoding",
    };
    if (req.headers["if-none-match"] === asset.etag) {
      res.writeHead(304, headers).end();
      return;
    }
    const gzip = /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""));
    const body = gzip ? asset.gzip : asset.body;
    res.writeHead(200, { ...headers, ...(gzip ? { "content-encoding": "gzip" } : {}), "content-length": String(body.length) }).end(body);
  }

  private async serveAudit(res: ServerResponse, actuator: string | null, params: URLSearchParams): Promise<void> {
    if (actuator === null || !ACTUATOR_PATTERN.test(actuator)) {
      return fail(res, 400, "INVALID_REQUEST", 'The actuator id in the path must be 1 to 64 lower-case letters, digits, "-" or "_".');
    }
    if (!this.options.board.has(actuator)) return fail(res, 404, "UNKNOWN_ACTUATOR", `No actuator "${actuator}" on this gateway.`);
    const query = parseAuditQuery(params);
    if ("problem" in query) return fail(res, 400, "INVALID_REQUEST", query.problem);
    try {
      this.audit ??= this.options.openAudit();
      // Commands' records reach the file within the audit lag: wait for those handed over
      // before this request, so the page has the newest commands; then read, and wait for
      // whatever the read saw that was written since (written, not yet synced): nothing
      // shown can be undone by a crash.
      await this.options.whenDurable();
      const page = this.audit.page({ actuator, ...query });
      await this.options.whenDurable();
      json(res, 200, { actuator, ...page } satisfies AuditAnswer);
    } catch (err) {
      const message = err instanceof AuditError ? err.message : `The audit trail could not be read: ${(err as Error).message}`;
      fail(res, 503, "JOURNAL_UNREADABLE", message);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Query parameters

const decimal = (what: string, min: number, max: number) =>
  z
    .string()
    .regex(/^[0-9]{1,16}$/, { error: `${what} must be a whole number from ${min} to ${max}.` })
    .transform(Number)
    .refine((n) => n >= min && n <= max, { error: `${what} must be a whole number from ${min} to ${max}.` });

const AUDIT_PARAMS = z.strictObject({
  holder: z.string().regex(HOLDER_PATTERN, { error: 'holder must be 1 to 128 letters, digits, ".", "_", ":" or "-".' }).optional(),
  outcome: z.enum(OUTCOME_FILTERS, { error: `outcome must be one of ${OUTCOME_FILTERS.join(", ")}.` }).optional(),
  before: decimal("before", 1, Number.MAX_SAFE_INTEGER).optional(),
  limit: decimal("limit", 1, MAX_PAGE).optional(),
  since: z
    .string()
    .max(MAX_SINCE_CHARS, { error: `since must be at most ${MAX_SINCE_CHARS} characters.` })
    .transform((s) => Date.parse(s))
    .refine(Number.isFinite, { error: "since must be a date and time, e.g. 2026-12-01T08:00:00Z." })
    .optional(),
});

type AuditParams = {
  holder?: string | undefined;
  outcome?: (typeof OUTCOME_FILTERS)[number] | undefined;
  before?: number | undefined;
  sinceMs?: number | undefined;
  limit: number;
};

function parseAuditQuery(params: URLSearchParams): AuditParams | { problem: string } {
  const raw: Record<string, string> = {};
  for (const [key, value] of params) {
    if (Object.hasOwn(raw, key)) return { problem: `${truncate(key)} is given twice; give each parameter once.` };
    raw[key] = value;
  }
  const parsed = AUDIT_PARAMS.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    if (issue.code === "unrecognized_keys")
      return {
        problem: `Unknown parameter ${truncate(issue.keys[0] ?? "")}; the audit trail takes holder, outcome, since, before and limit.`,
      };
    return { problem: issue.message };
  }
  const { holder, outcome, before, limit, since } = parsed.data;
  return { holder, outcome, before, sinceMs: since, limit: limit ?? DEFAULT_PAGE };
}

function decodeSegment(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

function truncate(s: string): string {
  return JSON.stringify(s.length > 40 ? `${s.slice(0, 40)}…` : s);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res
    .writeHead(status, { ...SECURITY_HEADERS, "content-type": "application/json; charset=utf-8", "cache-control": "no-store" })
    .end(JSON.stringify(body));
}

function fail(res: ServerResponse, status: number, code: string, message: string): void {
  json(res, status, { error: { code, message } } satisfies ApiError);
}

// ---------------------------------------------------------------------------------------
// Event streams

/** One server-sent event: its name, and its data as one line of JSON. */
function eventText<E extends keyof StatusEvents>(event: E, data: StatusEvents[E]): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

interface Stream {
  readonly res: ServerResponse;
}

class EventStreams {
  private readonly streams = new Set<Stream>();
  private decisions: Decision[] = [];
  /** Decisions left out of a flush because more than FEED_LIMIT came in one interval. */
  private skipped = 0;
  private readonly dirty = new Set<string>();
  private flushTimer: NodeJS.Timeout | null = null;
  private gatewayTimer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  private dropped = 0;
  private readonly maxBufferBytes: number;
  private readonly flushMs: number;

  constructor(private readonly options: StatusRoutesOptions) {
    this.maxBufferBytes = options.maxStreamBufferBytes ?? 256 * 1024;
    this.flushMs = options.flushMs ?? 100;
  }

  counts(): StreamCounts {
    return { open: this.streams.size, max: this.options.maxEventStreams, droppedSlow: this.dropped };
  }

  open(req: IncomingMessage, res: ServerResponse): void {
    if (this.streams.size >= this.options.maxEventStreams) {
      const max = this.options.maxEventStreams;
      return fail(
        res,
        503,
        "TOO_MANY_STREAMS",
        `${max} live feeds are open, the most this gateway serves (metrics.statusPage.maxEventStreams); close a page elsewhere, or raise the limit.`,
      );
    }
    res.writeHead(200, {
      ...SECURITY_HEADERS,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      "x-accel-buffering": "no",
    });
    req.socket.setNoDelay(true);
    const stream: Stream = { res };
    this.streams.add(stream);
    res.on("close", () => this.remove(stream));
    // The page loads /api/status when the stream opens: from here on, it only needs changes.
    res.write(`retry: 3000\n${eventText("hello", { gateway: this.options.board.gateway() })}`);
    if (this.streams.size === 1) this.start();
  }

  close(): void {
    for (const s of [...this.streams]) s.res.end();
    this.streams.clear();
    this.stop();
  }

  private start(): void {
    this.unsubscribe = this.options.board.subscribe((change) => {
      if ("decision" in change) {
        if (this.decisions.length >= FEED_LIMIT) {
          this.decisions.shift();
          this.skipped++;
        }
        this.decisions.push(change.decision);
      } else this.dirty.add(change.actuator);
      this.flushTimer ??= setTimeout(() => this.flush(), this.flushMs);
    });
    this.gatewayTimer = setInterval(
      () => this.send(eventText("gateway", this.options.board.gateway())),
      this.options.gatewayEveryMs ?? 2000,
    );
  }

  private stop(): void {
    this.unsubscribe?.();
    this.unsubscribe = null;
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    if (this.gatewayTimer !== null) clearInterval(this.gatewayTimer);
    this.flushTimer = null;
    this.gatewayTimer = null;
    this.decisions = [];
    this.skipped = 0;
    this.dirty.clear();
  }

  private remove(stream: Stream): void {
    if (this.streams.delete(stream) && this.streams.size === 0) this.stop();
  }

  private flush(): void {
    this.flushTimer = null;
    let text = "";
    if (this.decisions.length > 0) text += eventText("decisions", { decisions: this.decisions, skipped: this.skipped });
    // Only the board's own actuators are ever dirty (it notifies of no other).
    for (const id of this.dirty) text += eventText("actuator", this.options.board.actuator(id)!);
    this.decisions = [];
    this.skipped = 0;
    this.dirty.clear();
    if (text !== "") this.send(text);
  }

  /** One buffer for every stream; a stream with too much still unsent is closed instead. */
  private send(text: string): void {
    const chunk = Buffer.from(text);
    for (const stream of [...this.streams]) {
      if (stream.res.writableLength + chunk.length > this.maxBufferBytes) {
        this.dropped++;
        stream.res.destroy();
        this.remove(stream);
        continue;
      }
      stream.res.write(chunk);
    }
  }
}
