/**
 * Which `Host` headers the HTTP port answers (docs/deploy.md, "Health and metrics"). DNS rebinding: a web page
 * the operator opens gets its own name re-pointed at 127.0.0.1, and the browser then lets
 * it read the loopback-only status page and /api/* as same-origin, but the request still
 * carries the page's name in `Host`. Answered: loopback names, IP addresses (a page cannot
 * rebind an address), `metrics.host`, and the names in `metrics.hostNames`; others get 421.
 */

/** The name or address of a `Host` header, without port, brackets or trailing dot, lowercased; null if malformed. */
function hostOf(header: string): string | null {
  const h = header.trim().toLowerCase();
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    if (end < 0 || !/^(?::\d{1,5})?$/.test(h.slice(end + 1))) return null;
    return h.slice(1, end);
  }
  const m = /^([^:]*)(?::\d{1,5})?$/.exec(h);
  if (m === null || m[1] === "") return null;
  return m[1]!.replace(/\.$/, "");
}

const IPV4_RE = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;
const IPV6_RE = /^[0-9a-f:.]+$/;

/** The names the port answers besides IP addresses and loopback names: metrics.host (unless a wildcard address) and metrics.hostNames. */
export function allowedHostNames(metricsHost: string, hostNames: readonly string[]): ReadonlySet<string> {
  const names = new Set(hostNames.map((n) => n.toLowerCase().replace(/\.$/, "")));
  names.add(metricsHost.toLowerCase().replace(/^\[(.*)\]$/, "$1"));
  return names;
}

/** Whether a request with this `Host` header is answered (absent: an HTTP/1.0 client, not a browser). */
export function hostAllowed(header: string | undefined, names: ReadonlySet<string>): boolean {
  if (header === undefined) return true;
  const host = hostOf(header);
  if (host === null) return false;
  if (IPV4_RE.test(host) || (host.includes(":") && IPV6_RE.test(host))) return true;
  return host === "localhost" || host.endsWith(".localhost") || names.has(host);
}
