/**
 * `loadConfigFile`: the YAML file to a {@link GatewayConfig}, or one {@link ConfigError}
 * with every problem: YAML syntax (line and column), shape and cross-field rules (path and
 * line), and the files the configuration names (password, TLS), which are resolved
 * relative to the configuration file's directory.
 */
import { readFileSync, realpathSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { LineCounter, parseDocument, type Document } from "yaml";
import { check, resolvePaths, type Finding } from "./parse.ts";
import { ConfigError, formatPath, type ConfigProblem, type PathSegment } from "./problems.ts";
import type { GatewayConfig } from "./schema.ts";

export function loadConfigFile(path: string): GatewayConfig {
  const file = resolve(path);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError([{ path: "", message: `Cannot read the file: ${reason(err)}.` }], file);
  }
  return loadConfigText(text, { file });
}

/**
 * The same from text already read; `file` names it in messages and anchors relative paths
 * (default: the current directory).
 */
export function loadConfigText(text: string, options: { readonly file?: string } = {}): GatewayConfig {
  const baseDir = options.file === undefined ? process.cwd() : dirname(options.file);
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    const problems = doc.errors.map((e): ConfigProblem => {
      const at = e.linePos?.[0];
      return {
        path: "",
        message: `YAML syntax error: ${firstLine(e.message)}`,
        ...(at === undefined ? {} : { line: at.line, column: at.col }),
      };
    });
    throw new ConfigError(problems, options.file);
  }
  const result = check(doc.toJS());
  if (!result.ok) throw new ConfigError(byLine(result.found.map((f) => locate(f, doc, lines))), options.file);

  const config = resolvePaths(result.config, baseDir);
  const fileProblems: ConfigProblem[] = [];
  const need = (segments: PathSegment[], file: string | undefined): string | undefined => {
    if (file === undefined) return undefined;
    try {
      return readFileSync(file, "utf8");
    } catch (err) {
      fileProblems.push(locate({ segments, message: `Cannot read ${file}: ${reason(err)}.` }, doc, lines));
      return undefined;
    }
  };
  need(["mqtt", "tls", "caFile"], config.mqtt.tls?.caFile);
  need(["mqtt", "tls", "certFile"], config.mqtt.tls?.certFile);
  need(["mqtt", "tls", "keyFile"], config.mqtt.tls?.keyFile);
  fileProblems.push(...sameSerialDevice(config).map((f) => locate(f, doc, lines)));
  /** A file holding one secret (a trailing newline is not part of it). */
  const secret = (segments: PathSegment[], file: string | undefined, what: string, minChars = 1): string | undefined => {
    const value = need(segments, file)?.replace(/\r?\n$/, "");
    if (value === "") fileProblems.push(locate({ segments, message: `${file ?? ""} is empty; put the ${what} in it.` }, doc, lines));
    else if (value !== undefined && value.length < minChars)
      fileProblems.push(locate({ segments, message: `The ${what} in ${file ?? ""} must be at least ${minChars} characters.` }, doc, lines));
    return value;
  };
  const password = secret(["mqtt", "passwordFile"], config.mqtt.passwordFile, "password");
  need(["group", "tls", "caFile"], config.group?.tls?.caFile);
  need(["group", "tls", "certFile"], config.group?.tls?.certFile);
  need(["group", "tls", "keyFile"], config.group?.tls?.keyFile);
  const groupPassword = secret(["group", "passwordFile"], config.group?.passwordFile, "password");
  const auth = config.metrics.auth;
  // The same lengths as the schema asks of a token or password written in the file itself.
  const httpToken = secret(["metrics", "auth", "tokenFile"], auth?.tokenFile, "token", 16);
  const httpPassword = secret(["metrics", "auth", "passwordFile"], auth?.passwordFile, "password", 12);
  if (fileProblems.length > 0) throw new ConfigError(byLine(fileProblems), options.file);
  return {
    ...config,
    mqtt: password === undefined ? config.mqtt : { ...config.mqtt, password },
    ...(groupPassword === undefined || config.group === undefined ? {} : { group: { ...config.group, password: groupPassword } }),
    metrics:
      auth === undefined
        ? config.metrics
        : {
            ...config.metrics,
            auth: {
              ...auth,
              ...(httpToken !== undefined ? { token: httpToken } : {}),
              ...(httpPassword !== undefined ? { password: httpPassword } : {}),
            },
          },
  };
}

/**
 * Two buses whose serial paths are one device (a /dev/serial/by-id link and the ttyUSB it
 * points to, say): two masters on one line, the same units behind both. Paths that do not
 * exist yet are left to the daemon and doctor.
 */
function sameSerialDevice(config: GatewayConfig): Finding[] {
  const found: Finding[] = [];
  const byDevice = new Map<string, { bus: string; path: string }>();
  for (const [bus, b] of Object.entries(config.buses)) {
    if (b.type !== "rtu") continue;
    let device: string;
    try {
      device = realpathSync(b.path);
    } catch {
      continue;
    }
    const other = byDevice.get(device);
    if (other === undefined) byDevice.set(device, { bus, path: b.path });
    else if (other.path !== b.path) {
      found.push({
        segments: ["buses", bus, "path"],
        message: `Serial port "${b.path}" is ${device}, the same device as bus "${other.bus}"'s "${other.path}"; put all units on that port under one bus.`,
      });
    }
  }
  return found;
}

/** In file order, as the reader will fix them (stable: same line keeps the reported order). */
function byLine(problems: ConfigProblem[]): ConfigProblem[] {
  return problems
    .map((p, i) => ({ p, i }))
    .sort((a, b) => (a.p.line ?? 0) - (b.p.line ?? 0) || a.i - b.i)
    .map(({ p }) => p);
}

/** The problem with its path formatted and the line of the nearest node that exists. */
function locate(finding: Finding, doc: Document, lines: LineCounter): ConfigProblem {
  const problem = { path: formatPath(finding.segments), message: finding.message };
  for (let n = finding.segments.length; n >= 0; n--) {
    const node: unknown = n === 0 ? doc.contents : doc.getIn(finding.segments.slice(0, n), true);
    const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
    if (range !== undefined) return { ...problem, line: lines.linePos(range[0]).line };
  }
  return problem;
}

/** yaml's message without the position and source excerpt it appends (we report those). */
function firstLine(message: string): string {
  const line = message.split("\n", 1)[0] ?? message;
  return line.replace(/ at line \d+, column \d+:?$/, "").replace(/[^.]$/, "$&.");
}

function reason(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === "ENOENT") return "no such file";
  if (code === "EACCES") return "permission denied";
  if (code === "EISDIR") return "it is a directory";
  return err instanceof Error ? err.message : String(err);
}
