/**
 * A small etcd v3 client over etcd's own JSON gateway (`POST /v3/...` on the client port,
 * served by every etcd since 3.3), on Node's http/https: no dependency.
 *
 * Why not the `etcd3` package (gRPC): on this machine it adds 27 packages and 16 MB
 * (@grpc/grpc-js, protobufjs, cockatiel, yargs...), about +22 MB RSS over this client in the
 * same script and 0.3 s to import, several times that on a Pi; and its lease keep-alive runs
 * on a stream that hides when each renewal was sent, which is exactly what the gateway's
 * self-fencing needs (see src/core/leadership.ts). Here every renewal is one request whose
 * send time the caller records.
 *
 * - Endpoints: one is used until it fails (connection refused, reset, timeout, or etcd
 *   saying it has no leader); then the next, within the request's deadline.
 * - TLS: a CA to verify the members, and a client certificate for `--client-cert-auth`.
 * - Authentication: user name and password exchanged for a token (`/v3/auth/authenticate`),
 *   sent on every request, fetched again when etcd says it is no longer valid.
 * - Keys and values are UTF-8 strings here, base64 on the wire; 64-bit integers arrive as
 *   decimal strings and fields equal to their default (0, false, empty) are left out.
 */
import http from "node:http";
import https from "node:https";

export interface EtcdClientOptions {
  /** `http://host:port` or `https://host:port`, one per member. */
  readonly endpoints: readonly string[];
  readonly tls?: { readonly ca?: Buffer; readonly cert?: Buffer; readonly key?: Buffer; readonly rejectUnauthorized?: boolean };
  readonly username?: string;
  readonly password?: string;
  /** A whole request, over every endpoint it tries, ends by this deadline. */
  readonly requestTimeoutMs: number;
}

/** The largest response body read; etcd's answers here are a few hundred bytes. */
const MAX_RESPONSE_BYTES = 1_048_576;

/**
 * Why a request failed. `unavailable`: no member answered in time, or none with a quorum
 * (the request may or may not have been applied: callers compare before they act again);
 * `refused`: etcd answered and said no (permissions, a bad request): retrying does not help.
 */
export class EtcdError extends Error {
  override readonly name = "EtcdError";
  constructor(
    readonly kind: "unavailable" | "refused",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface KeyValue {
  readonly key: string;
  readonly value: string;
  readonly createRevision: number;
  readonly modRevision: number;
  readonly lease: string;
}

export type Compare =
  | { readonly key: string; readonly target: "CREATE"; readonly result: "EQUAL"; readonly createRevision: number }
  | { readonly key: string; readonly target: "VALUE"; readonly result: "EQUAL" | "LESS"; readonly value: string }
  | { readonly key: string; readonly target: "MOD"; readonly result: "EQUAL"; readonly modRevision: number };

export type Operation =
  | { readonly put: { readonly key: string; readonly value: string; readonly lease?: string } }
  | { readonly range: { readonly key: string } }
  | { readonly delete: { readonly key: string } };

export interface TxnResult {
  readonly succeeded: boolean;
  readonly revision: number;
  /** The key-values of every `range` operation of the branch that ran, in order. */
  readonly ranges: readonly (KeyValue | null)[];
}

const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64");
const unb64 = (s: unknown) => (typeof s === "string" ? Buffer.from(s, "base64").toString("utf8") : "");
const int = (s: unknown) => (typeof s === "string" || typeof s === "number" ? Number(s) : 0);

function keyValue(kv: Record<string, unknown> | undefined): KeyValue | null {
  if (kv === undefined) return null;
  return {
    key: unb64(kv.key),
    value: unb64(kv.value),
    createRevision: int(kv.create_revision),
    modRevision: int(kv.mod_revision),
    lease: String(kv.lease ?? "0"),
  };
}

function compareJson(c: Compare): Record<string, unknown> {
  const base = { key: b64(c.key), target: c.target, result: c.result };
  switch (c.target) {
    case "CREATE":
      return { ...base, createRevision: String(c.createRevision) };
    case "MOD":
      return { ...base, modRevision: String(c.modRevision) };
    case "VALUE":
      return { ...base, value: b64(c.value) };
  }
}

function operationJson(op: Operation): Record<string, unknown> {
  if ("put" in op)
    return { requestPut: { key: b64(op.put.key), value: b64(op.put.value), ...(op.put.lease ? { lease: op.put.lease } : {}) } };
  if ("range" in op) return { requestRange: { key: b64(op.range.key) } };
  return { requestDeleteRange: { key: b64(op.delete.key) } };
}

interface Answer {
  readonly status: number;
  readonly body: Record<string, unknown>;
}

export class EtcdClient {
  private readonly agent: http.Agent;
  private current = 0;
  private authToken: string | null = null;
  private closed = false;

  constructor(private readonly options: EtcdClientOptions) {
    if (options.endpoints.length === 0) throw new RangeError("an etcd client needs at least one endpoint");
    const secure = options.endpoints.some((e) => e.startsWith("https:"));
    // A few sockets, kept open: a renewal must not wait for a TCP (and TLS) handshake.
    this.agent = secure
      ? new https.Agent({
          keepAlive: true,
          maxSockets: 4,
          rejectUnauthorized: options.tls?.rejectUnauthorized ?? true,
          ...(options.tls?.ca ? { ca: options.tls.ca } : {}),
          ...(options.tls?.cert ? { cert: options.tls.cert, key: options.tls.key } : {}),
        })
      : new http.Agent({ keepAlive: true, maxSockets: 4 });
  }

  /** Grants a lease of `ttlS` seconds; etcd may raise a TTL below its minimum. */
  async grantLease(ttlS: number): Promise<{ id: string; ttlS: number }> {
    const body = await this.call("/v3/lease/grant", { TTL: String(ttlS) });
    const id = String(body.ID ?? "");
    if (id === "" || id === "0") throw new EtcdError("refused", `etcd granted no lease: ${String(body.error ?? JSON.stringify(body))}`);
    return { id, ttlS: int(body.TTL) };
  }

  /** One renewal. Returns the TTL etcd now gives the lease, in seconds; 0 when the lease is gone. */
  async keepAlive(id: string): Promise<number> {
    const body = await this.call("/v3/lease/keepalive", { ID: id });
    const result = body.result as Record<string, unknown> | undefined;
    return int(result?.TTL);
  }

  async revokeLease(id: string): Promise<void> {
    try {
      await this.call("/v3/lease/revoke", { ID: id });
    } catch (err) {
      // Already gone is what a revoke wants.
      if (!(err instanceof EtcdError && /lease not found/.test(err.message))) throw err;
    }
  }

  async get(key: string): Promise<KeyValue | null> {
    const body = await this.call("/v3/kv/range", { key: b64(key) });
    const kvs = body.kvs as Record<string, unknown>[] | undefined;
    return keyValue(kvs?.[0]);
  }

  /** The keys under `prefix`, at most `limit` of them (the rest are not read). */
  async list(prefix: string, limit: number): Promise<KeyValue[]> {
    const end = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
    const body = await this.call("/v3/kv/range", { key: b64(prefix), range_end: b64(end), limit: String(limit) });
    return ((body.kvs as Record<string, unknown>[] | undefined) ?? []).map((kv) => keyValue(kv)!);
  }

  async put(key: string, value: string): Promise<void> {
    await this.call("/v3/kv/put", { key: b64(key), value: b64(value) });
  }

  async txn(compare: readonly Compare[], success: readonly Operation[], failure: readonly Operation[]): Promise<TxnResult> {
    const body = await this.call("/v3/kv/txn", {
      compare: compare.map(compareJson),
      success: success.map(operationJson),
      failure: failure.map(operationJson),
    });
    const responses = (body.responses as Record<string, unknown>[] | undefined) ?? [];
    const ranges = responses
      .filter((r) => r.response_range !== undefined)
      .map((r) => keyValue(((r.response_range as Record<string, unknown>).kvs as Record<string, unknown>[] | undefined)?.[0]));
    return { succeeded: body.succeeded === true, revision: int((body.header as Record<string, unknown> | undefined)?.revision), ranges };
  }

  close(): void {
    this.closed = true;
    this.agent.destroy();
  }

  /** One API call: tries the endpoints in turn until one answers or the deadline passes. */
  private async call(path: string, payload: unknown): Promise<Record<string, unknown>> {
    const { endpoints, requestTimeoutMs } = this.options;
    const deadline = performance.now() + requestTimeoutMs;
    // Each endpoint gets a fair share of the deadline, so one hanging member (cut off from
    // the others, waiting for a quorum) leaves time to ask the next one.
    const perAttemptMs = Math.max(100, Math.floor(requestTimeoutMs / endpoints.length));
    let lastError: unknown = null;
    let reauthenticated = false;
    for (let attempt = 0; attempt < endpoints.length * 2 && !this.closed; attempt++) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      const endpoint = endpoints[this.current]!;
      try {
        if (this.options.username !== undefined && this.authToken === null) await this.authenticate(endpoint, Math.min(left, perAttemptMs));
        const answer = await this.post(endpoint, path, payload, Math.min(deadline - performance.now(), perAttemptMs));
        if (answer.status >= 200 && answer.status < 300) return answer.body;
        const message = String(answer.body.message ?? answer.body.error ?? `HTTP ${answer.status}`);
        if (answer.status === 401 && this.options.username !== undefined && !reauthenticated) {
          // Simple tokens expire (5 minutes by default) and die with a member restart.
          this.authToken = null;
          reauthenticated = true;
          attempt--;
          continue;
        }
        if (!retryable(answer.status, message)) throw new EtcdError("refused", `etcd ${endpoint} ${path}: ${message}`);
        lastError = new Error(message);
      } catch (err) {
        if (err instanceof EtcdError && err.kind === "refused") throw err;
        lastError = err;
      }
      this.current = (this.current + 1) % endpoints.length;
    }
    throw new EtcdError("unavailable", `no etcd endpoint answered ${path} within ${requestTimeoutMs} ms (last: ${describe(lastError)})`, {
      cause: lastError,
    });
  }

  private async authenticate(endpoint: string, timeoutMs: number): Promise<void> {
    const answer = await this.post(
      endpoint,
      "/v3/auth/authenticate",
      { name: this.options.username, password: this.options.password ?? "" },
      timeoutMs,
      false,
    );
    if (answer.status !== 200 || typeof answer.body.token !== "string") {
      const message = String(answer.body.message ?? answer.body.error ?? `HTTP ${answer.status}`);
      if (retryable(answer.status, message)) throw new Error(message);
      const hint = /CommonName of client/.test(message)
        ? " (with etcd authentication on, give the gateway a client certificate without a Common Name: its identity is the etcd user)"
        : "";
      throw new EtcdError("refused", `etcd refused user ${this.options.username ?? ""}: ${message.trim()}${hint}`);
    }
    this.authToken = answer.body.token;
  }

  private post(endpoint: string, path: string, payload: unknown, timeoutMs: number, withToken = true): Promise<Answer> {
    const url = new URL(path, endpoint);
    const transport = url.protocol === "https:" ? https : http;
    const body = JSON.stringify(payload);
    return new Promise((resolve, reject) => {
      const req = transport.request(url, {
        method: "POST",
        agent: this.agent,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          ...(withToken && this.authToken ? { authorization: this.authToken } : {}),
        },
      });
      const timer = setTimeout(() => req.destroy(new Error("no answer in time")), Math.max(1, timeoutMs));
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_RESPONSE_BYTES) req.destroy(new Error(`response larger than ${MAX_RESPONSE_BYTES} bytes`));
          else chunks.push(chunk);
        });
        res.on("end", () => {
          clearTimeout(timer);
          const text = Buffer.concat(chunks).toString("utf8");
          try {
            const parsed: unknown = text === "" ? {} : JSON.parse(text);
            resolve({
              status: res.statusCode ?? 0,
              body: typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>) : {},
            });
          } catch {
            resolve({ status: res.statusCode ?? 0, body: { message: text.slice(0, 200) } });
          }
        });
        res.on("error", (err) => {
          clearTimeout(timer);
          reject(err);
        });
      });
      req.on("error", (err) => {
        clearTimeout(timer);
        reject(err);
      });
      req.end(body);
    });
  }
}

/** Whether another member may answer where this one could not. */
function retryable(status: number, message: string): boolean {
  if (status >= 500) return true;
  return /no leader|leader changed|timed out|too many requests|not capable|unhealthy|stopped/i.test(message);
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
