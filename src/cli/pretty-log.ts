/**
 * The daemon's log for a person at a terminal: each pino JSON line as one line of text,
 *   14:02:07.118 INFO  lease granted  actuator=valve-1 holder=line-a token=1
 * Under systemd (stdout not a terminal) the daemon keeps pino's JSON, for journalctl and jq.
 */
export const LOG_FORMATS = ["pretty", "json"] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

const LEVELS: Readonly<Record<number, string>> = { 10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL" };
/** ANSI colours for the levels that need attention. */
const COLOURS: Readonly<Record<number, string>> = { 40: "\x1b[33m", 50: "\x1b[31m", 60: "\x1b[1;31m" };
/** pino's own fields, shown in the line's head or not at all. */
const HEAD = new Set(["level", "time", "msg", "pid", "hostname"]);

function value(v: unknown): string {
  if (typeof v === "string") return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  return JSON.stringify(v) ?? String(v);
}

/** One pino JSON line as text (a line that is not JSON passes unchanged). */
export function prettyLine(json: string, colour = false): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith("\n") ? json : `${json}\n`;
  }
  const level = typeof entry.level === "number" ? entry.level : 30;
  const time = typeof entry.time === "number" ? new Date(entry.time).toISOString().slice(11, 23) : "";
  const label = (LEVELS[level] ?? String(level)).padEnd(5);
  // pino's err serializer gives {type, message, stack}: the message in the line, the stack under it.
  const err = entry.err as { message?: unknown; stack?: unknown } | undefined;
  const stack = typeof err === "object" && err !== null && typeof err.stack === "string" ? err.stack : null;
  const fields = Object.entries(entry)
    .filter(([k]) => !HEAD.has(k))
    .map(([k, v]) => `${k}=${value(k === "err" && stack !== null ? err!.message : v)}`)
    .join(" ");
  const paint = colour && COLOURS[level] !== undefined ? (s: string) => `${COLOURS[level]}${s}\x1b[0m` : (s: string) => s;
  const under =
    stack === null
      ? ""
      : stack
          .split("\n")
          .slice(1)
          .map((l) => `    ${l.trim()}\n`)
          .join("");
  return `${time} ${paint(label)} ${entry.msg ?? ""}${fields ? `  ${fields}` : ""}\n${under}`;
}

/** A pino destination writing pretty lines to `stream` (a terminal). */
export function prettyDestination(stream: NodeJS.WriteStream): { write(line: string): void } {
  const colour = stream.isTTY === true && process.env["NO_COLOR"] === undefined;
  return { write: (line) => void stream.write(prettyLine(line, colour)) };
}
