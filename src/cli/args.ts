/**
 * Command-line parsing for every `fencegate` command: Node's parseArgs, with its errors
 * said in the project's words. Its own wording leaks parser terms ("argument is
 * ambiguous") and, for an unknown option, ends on an unbalanced quote.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";

/** The command line is wrong; the message says how, naming the option as typed. */
export class ArgsError extends Error {}

type Options = NonNullable<ParseArgsConfig["options"]>;

/** `--name` for an option named in parseArgs' message as `-b`, `--broker` or `-b, --broker`. */
function longName(quoted: string, options: Options): string {
  const long = /--([^\s'<]+)/.exec(quoted);
  if (long) return `--${long[1]}`;
  const short = /^-(\w)/.exec(quoted)?.[1];
  const entry = Object.entries(options).find(([, o]) => o.short === short);
  return entry ? `--${entry[0]}` : quoted;
}

function explain(err: Error & { code?: string }, args: readonly string[], options: Options): string {
  if (err.code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL")
    return `unexpected argument "${/'([^']*)'/.exec(err.message)?.[1] ?? ""}": this command takes options only`;
  const quoted = /'(-[^']*)'/.exec(err.message)?.[1];
  if (quoted === undefined) return err.message.split("\n")[0]!;
  const typed = quoted
    .replace(/ <value>$/, "")
    .split(", ")
    .at(-1)!;
  const name = longName(quoted, options);
  if (err.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") return `unknown option "${typed}"`;
  if (/does not take an argument/.test(err.message)) return `${name} takes no value`;
  // "ambiguous": the next word starts with "-"; a negative number (`--seq -1`) is meant as the value.
  const next = args[args.findIndex((a) => a === typed || a === name) + 1];
  if (/ambiguous/.test(err.message) && next !== undefined && /^-[\d.]/.test(next))
    return `${name} needs a value; "${next}" starts with "-", so write ${name}=${next} if that is the value`;
  return `${name} needs a value`;
}

/** parseArgs with strict options; its errors as ArgsError in the project's wording. */
export function parseCommandLine<O extends Options>(args: readonly string[], options: O, allowPositionals = true) {
  try {
    return parseArgs({ args: [...args], options, allowPositionals, strict: true });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS"))
      throw new ArgsError(explain(err as Error & { code: string }, args, options));
    throw err;
  }
}
