/**
 * What each member of a gateway group publishes about its actuators in etcd, and how two
 * members' differ. Members with different actuators (another safe value, another range, an
 * actuator only one of them has) would each serve the same controllers differently after a
 * failover: a member whose configuration differs from another's does not campaign
 * (docs/gateway-group.md, "Members with different configurations").
 *
 * Published under `/fencegate/<group>/members/<gatewayId>`, not attached to a lease (a member
 * that is down still says what it would serve): `{ gateway, digest, settings }`, `settings`
 * being, per actuator, its configuration entry without the bus (the connection may differ
 * between gateways: another serial port), plus the gateway-wide lease and command limits
 * (built from the configuration in src/config/etcd.ts).
 */
import { createHash } from "node:crypto";

export interface PublishedConfig {
  readonly gateway: string;
  /** sha256 of the canonical JSON of `settings`: equal digests, equal settings. */
  readonly digest: string;
  readonly settings: { readonly limits: unknown; readonly actuators: Readonly<Record<string, unknown>> };
}

/** At most this many differences are named (the rest counted): a sentence stays readable. */
const MAX_NAMED = 8;

/** What a member publishes of `settings`: their canonical JSON (keys sorted) and its digest. */
export function publishedSettings(gateway: string, settings: PublishedConfig["settings"]): PublishedConfig {
  const canon = canonical(settings) as PublishedConfig["settings"];
  return { gateway, digest: createHash("sha256").update(JSON.stringify(canon)).digest("hex"), settings: canon };
}

/** Parses another member's published value; null for one not written by fencegate. */
export function parsePublished(value: string): PublishedConfig | null {
  try {
    const v = JSON.parse(value) as Partial<PublishedConfig>;
    if (typeof v.gateway !== "string" || typeof v.digest !== "string" || typeof v.settings !== "object" || v.settings === null) return null;
    const s = v.settings as Partial<PublishedConfig["settings"]>;
    if (typeof s.actuators !== "object" || s.actuators === null) return null;
    return v as PublishedConfig;
  } catch {
    return null;
  }
}

/**
 * How `other`'s actuators differ from `mine`, one phrase per difference ("valve-1:
 * points.position.max 100 here, 50 on gw-b"), at most MAX_NAMED and a count of the rest;
 * empty when the digests are equal.
 */
export function configDifferences(mine: PublishedConfig, other: PublishedConfig): string[] {
  if (mine.digest === other.digest) return [];
  const found: string[] = [];
  const there = `on ${other.gateway}`;
  const ids = [...new Set([...Object.keys(mine.settings.actuators), ...Object.keys(other.settings.actuators)])].sort();
  for (const id of ids) {
    const a = mine.settings.actuators[id];
    const b = other.settings.actuators[id];
    if (b === undefined) found.push(`${id}: configured here, not ${there}`);
    else if (a === undefined) found.push(`${id}: configured ${there}, not here`);
    else for (const path of leafDifferences(a, b, "")) found.push(`${id}: ${path.name} ${show(path.a)} here, ${show(path.b)} ${there}`);
  }
  for (const path of leafDifferences(mine.settings.limits, other.settings.limits, ""))
    found.push(`leases and commands: ${path.name} ${show(path.a)} here, ${show(path.b)} ${there}`);
  if (found.length === 0)
    found.push(`the settings differ from ${other.gateway}'s in a way this version cannot name (another fencegate version?)`);
  return found.length > MAX_NAMED ? [...found.slice(0, MAX_NAMED), `and ${found.length - MAX_NAMED} more`] : found;
}

function leafDifferences(a: unknown, b: unknown, prefix: string): { name: string; a: unknown; b: unknown }[] {
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => leafDifferences(a[k], b[k], prefix === "" ? k : `${prefix}.${k}`));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [{ name: prefix === "" ? "(all)" : prefix, a, b }];
}

function show(v: unknown): string {
  if (v === undefined) return "unset";
  const text = JSON.stringify(v);
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Keys sorted at every level, undefined left out: one JSON text per set of settings. */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (!isObject(v)) return v;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v).sort()) if (v[k] !== undefined) out[k] = canonical(v[k]);
  return out;
}
