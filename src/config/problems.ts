/**
 * Configuration problems: where (a path such as `actuators[2].points.position.max`) and
 * what to do about it (one sentence for the person editing the file).
 */

export type PathSegment = string | number;

export interface ConfigProblem {
  /** `""` for the file as a whole; otherwise e.g. `buses.rs485.baudRate`, `actuators[0].id`. */
  readonly path: string;
  readonly message: string;
  /** 1-based line in the YAML file, when the problem was found in a file and the line is known. */
  readonly line?: number;
  /** 1-based column, only for YAML syntax errors. */
  readonly column?: number;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `["actuators", 2, "points", "position", "max"]` → `actuators[2].points.position.max`. */
export function formatPath(path: readonly PathSegment[]): string {
  let out = "";
  for (const segment of path) {
    if (typeof segment === "number") out += `[${segment}]`;
    else if (IDENTIFIER.test(segment)) out += out === "" ? segment : `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out;
}

function describe(problem: ConfigProblem): string {
  const where = problem.path === "" ? "(file)" : problem.path;
  const at = problem.line === undefined ? "" : ` (line ${problem.line}${problem.column === undefined ? "" : `, column ${problem.column}`})`;
  return `  - ${where}${at}: ${problem.message}`;
}

/** Thrown by the loader with every problem found, never just the first. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly problems: readonly ConfigProblem[];

  constructor(problems: readonly ConfigProblem[], source?: string) {
    const count = problems.length === 1 ? "1 problem" : `${problems.length} problems`;
    const head = `Configuration${source === undefined ? "" : ` ${source}`} has ${count}:`;
    super([head, ...problems.map(describe)].join("\n"));
    this.problems = problems;
  }
}

/** The closest of `candidates` to `word`, if it is close enough to be a likely typo. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.floor(word.length / 3)) + 1;
  for (const candidate of candidates) {
    const d = distance(word.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Levenshtein distance, two rows. */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}
