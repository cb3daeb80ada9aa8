/**
 * Who may read the HTTP port (status page, /metrics, /healthz) when it is bound beyond
 * loopback: a bearer token, or a user name and password (HTTP basic auth). With a token, a
 * browser's login prompt takes any user name and the token as the password; Prometheus
 * sends `Authorization: Bearer <token>`. Compared in constant time.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";

export type HttpAuth = { readonly token: string } | { readonly username: string; readonly password: string };

/** The longest Authorization header looked at; longer ones are refused unread. */
const MAX_AUTHORIZATION_CHARS = 2048;

export function isAuthorized(req: IncomingMessage, auth: HttpAuth | null): boolean {
  if (auth === null) return true;
  const header = req.headers.authorization;
  if (typeof header !== "string" || header.length > MAX_AUTHORIZATION_CHARS) return false;
  const [scheme, value = ""] = header.split(" ", 2);
  if ("token" in auth) {
    if (scheme?.toLowerCase() === "bearer") return same(value, auth.token);
    const basic = decodeBasic(scheme, value);
    return basic !== null && same(basic.password, auth.token);
  }
  const basic = decodeBasic(scheme, value);
  // Both compared, always: the time taken does not say which one was wrong.
  return basic !== null && same(basic.username, auth.username) && same(basic.password, auth.password);
}

/** 401 with the challenge that makes a browser ask for credentials. */
export function challenge(res: ServerResponse): void {
  res
    .writeHead(401, {
      "www-authenticate": 'Basic realm="fencegate", charset="UTF-8"',
      "content-type": "text/plain; charset=utf-8",
      "cache-control": "no-store",
    })
    .end("This gateway's status page and metrics need credentials (metrics.auth in its configuration).\n");
}

function decodeBasic(scheme: string | undefined, value: string): { username: string; password: string } | null {
  if (scheme?.toLowerCase() !== "basic") return null;
  const text = Buffer.from(value, "base64").toString("utf8");
  const colon = text.indexOf(":");
  return colon < 0 ? null : { username: text.slice(0, colon), password: text.slice(colon + 1) };
}

function same(a: string, b: string): boolean {
  // Hashes have one length, so timingSafeEqual never throws and the length stays secret.
  return timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest());
}
