/**
 * `parseConfig`: a plain value (as read from YAML or JSON) to a {@link GatewayConfig}, or a
 * {@link ConfigError} listing every problem with its path and a sentence saying what to do.
 * No I/O here: files named in the configuration are checked by `loadConfigFile`.
 */
import { isAbsolute, resolve } from "node:path";
import type * as z from "zod";
import { ConfigError, closest, formatPath, type ConfigProblem, type PathSegment } from "./problems.ts";
import { gatewayConfigSchema, type GatewayConfig } from "./schema.ts";

export interface ParseOptions {
  /** Relative file paths in the configuration (journal, password and TLS files) are resolved against it. */
  readonly baseDir?: string;
  /** Named in the error message, e.g. the file path. */
  readonly source?: string;
}

/** Validates `value` and applies defaults. Throws {@link ConfigError} with every problem found. */
export function parseConfig(value: unknown, options: ParseOptions = {}): GatewayConfig {
  const result = validate(value);
  if (!result.ok) throw new ConfigError(result.problems, options.source);
  return options.baseDir === undefined ? result.config : resolvePaths(result.config, options.baseDir);
}

export type Validation = { readonly ok: true; readonly config: GatewayConfig } | { readonly ok: false; readonly problems: ConfigProblem[] };

/** Like {@link parseConfig} but returns the problems instead of throwing. */
function validate(value: unknown): Validation {
  const result = check(value);
  if (result.ok) return result;
  return { ok: false, problems: result.found.map(({ segments, message }) => ({ path: formatPath(segments), message })) };
}

/** A problem with its path still as segments, so that the file loader can find its line. */
export interface Finding {
  readonly segments: readonly PathSegment[];
  readonly message: string;
}

export function check(
  value: unknown,
): { readonly ok: true; readonly config: GatewayConfig } | { readonly ok: false; readonly found: Finding[] } {
  if (value === undefined || value === null) {
    return { ok: false, found: [{ segments: [], message: "The configuration is empty; start from one of the examples in config/." }] };
  }
  const knownKeys = new Map<string, readonly string[]>();
  const result = gatewayConfigSchema.safeParse(value, { error: (issue) => message(issue, knownKeys) });
  if (result.success) return { ok: true, config: result.data };
  const seen = new Set<string>();
  const found = result.error.issues
    .flatMap((issue) => findings(issue, knownKeys))
    .filter((f) => {
      // One value can fail several checks that share a message (below min and not whole).
      const key = `${formatPath(f.segments)}\u0000${f.message}`;
      return seen.has(key) ? false : (seen.add(key), true);
    });
  return { ok: false, found };
}

function findings(issue: z.core.$ZodIssue, knownKeys: Map<string, readonly string[]>): Finding[] {
  const path = issue.path as PathSegment[];
  if (issue.code === "unrecognized_keys") {
    const known = knownKeys.get(formatPath(path)) ?? [];
    return issue.keys.map((key) => {
      const guess = closest(key, known);
      const hint = guess === undefined ? `known settings here: ${known.join(", ")}` : `did you mean "${guess}"?`;
      return { segments: [...path, key], message: `Unknown setting "${key}" (${hint}).` };
    });
  }
  return [{ segments: path, message: issue.message }];
}

/** Plant-engineer wording for zod's built-in issues; schema-specific messages win over this. */
function message(issue: z.core.$ZodRawIssue, knownKeys: Map<string, readonly string[]>): string | undefined {
  switch (issue.code) {
    case "invalid_type":
      if (issue.input === undefined) return "Required: this setting is missing.";
      return `Must be ${expectedName(issue.expected)}, not ${describe(issue.input)}.`;
    case "invalid_value": {
      if (issue.input === undefined)
        return `Required: this setting is missing; it is ${oneOf(issue.values.map((v) => JSON.stringify(v)))}.`;
      const values = issue.values.map((v) => JSON.stringify(v));
      const guess = typeof issue.input === "string" ? closest(issue.input, issue.values.map(String)) : undefined;
      return `Must be ${oneOf(values)}, not ${describe(issue.input)}${guess === undefined ? "" : ` (did you mean "${guess}"?)`}.`;
    }
    case "invalid_union":
      if ("discriminator" in issue && Array.isArray(issue.options)) {
        const values = (issue.options as unknown[]).map((v) => JSON.stringify(v));
        return `Must be ${oneOf(values)}.`;
      }
      return undefined;
    case "unrecognized_keys": {
      const shape = (issue.inst as { _zod?: { def?: { shape?: object } } } | undefined)?._zod?.def?.shape;
      if (shape !== undefined) knownKeys.set(formatPath((issue.path as PathSegment[] | undefined) ?? []), Object.keys(shape));
      return undefined;
    }
    case "invalid_key":
      return issue.issues[0]?.message;
    case "too_small":
      if (issue.origin === "array") return `Must have at least ${String(issue.minimum)} entries.`;
      return `Must be at least ${String(issue.minimum)}.`;
    case "too_big":
      if (issue.origin === "array") return `Must have at most ${String(issue.maximum)} entries.`;
      return `Must be at most ${String(issue.maximum)}.`;
    default:
      return undefined;
  }
}

function oneOf(values: readonly string[]): string {
  if (values.length === 1) return values[0] ?? "";
  return `one of ${values.slice(0, -1).join(", ")} or ${values[values.length - 1] ?? ""}`;
}

function expectedName(expected: string): string {
  switch (expected) {
    case "number":
    case "int":
      return "a number";
    case "string":
      return "text";
    case "boolean":
      return "true or false";
    case "object":
    case "record":
      return "a mapping of settings (key: value lines)";
    case "array":
      return 'a list ("- " items)';
    default:
      return expected;
  }
}

function describe(value: unknown): string {
  if (value === null) return "empty (null)";
  if (Array.isArray(value)) return "a list";
  switch (typeof value) {
    case "string":
      return `the text ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
    case "number":
      return `the number ${value}`;
    case "boolean":
      return String(value);
    case "object":
      return "a mapping";
    default:
      return typeof value;
  }
}

/** Every relative file path in the configuration, made absolute against `baseDir`. */
export function resolvePaths(config: GatewayConfig, baseDir: string): GatewayConfig {
  const abs = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
  const opt = (p: string | undefined): string | undefined => (p === undefined ? undefined : abs(p));
  const { tls } = config.mqtt;
  const group = config.group;
  const groupTls = group?.tls;
  return {
    ...config,
    ...(group === undefined
      ? {}
      : {
          group: {
            ...group,
            passwordFile: opt(group.passwordFile),
            tls:
              groupTls === undefined
                ? undefined
                : { ...groupTls, caFile: opt(groupTls.caFile), certFile: opt(groupTls.certFile), keyFile: opt(groupTls.keyFile) },
          },
        }),
    mqtt: {
      ...config.mqtt,
      passwordFile: opt(config.mqtt.passwordFile),
      tls: tls === undefined ? undefined : { ...tls, caFile: opt(tls.caFile), certFile: opt(tls.certFile), keyFile: opt(tls.keyFile) },
    },
    journal: { ...config.journal, path: abs(config.journal.path) },
    metrics: {
      ...config.metrics,
      auth: config.metrics.auth && {
        ...config.metrics.auth,
        tokenFile: opt(config.metrics.auth.tokenFile),
        passwordFile: opt(config.metrics.auth.passwordFile),
      },
    },
  };
}
