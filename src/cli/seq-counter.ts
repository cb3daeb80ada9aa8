/**
 * `fencegate send` without --seq: the next seq of a (broker, base topic, actuator, holder,
 * token), from a counter kept in a small state file. Not the wall clock: a clock that steps
 * back would make the next send STALE_SEQ. The counter is written before the command goes
 * out, so no seq is ever sent twice from here (docs/mqtt-api.md: seqs rise under a token).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** Counters kept; the least recently used go first. A token is done with once its lease ends. */
export const MAX_SEQ_COUNTERS = 256;

/** `FENCEGATE_STATE_DIR`, else `$XDG_STATE_HOME/fencegate`, else `~/.local/state/fencegate`. */
export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.FENCEGATE_STATE_DIR || join(env.XDG_STATE_HOME || join(homedir(), ".local", "state"), "fencegate");
}

export class SeqCounterError extends Error {}

export class SeqCounters {
  readonly file: string;

  constructor(dir: string) {
    this.file = join(dir, "send-seq.json");
  }

  private load(): Map<string, number> {
    let text: string;
    try {
      text = readFileSync(this.file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return new Map();
      throw new SeqCounterError(
        `cannot read the seq counters in ${this.file} (${(err as Error).message}): pass --seq N, or set FENCEGATE_STATE_DIR`,
      );
    }
    try {
      const parsed = JSON.parse(text) as unknown;
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object");
      return new Map(Object.entries(parsed).filter((e): e is [string, number] => Number.isSafeInteger(e[1]) && (e[1] as number) >= 0));
    } catch {
      // A torn or hand-edited file: start afresh; a seq below the fence is moved above it (see send).
      return new Map();
    }
  }

  private save(counters: Map<string, number>): void {
    const entries = [...counters].slice(-MAX_SEQ_COUNTERS);
    try {
      mkdirSync(join(this.file, ".."), { recursive: true, mode: 0o700 });
      const temp = `${this.file}.${process.pid}.tmp`;
      writeFileSync(temp, `${JSON.stringify(Object.fromEntries(entries))}\n`, { mode: 0o600 });
      renameSync(temp, this.file);
    } catch (err) {
      throw new SeqCounterError(
        `cannot keep the seq counter in ${this.file} (${(err as Error).message}): pass --seq N, or set FENCEGATE_STATE_DIR to a writable directory`,
      );
    }
  }

  /** The next seq for `key`, above `atLeast` - 1, recorded before it is used. */
  next(key: string, atLeast = 0): number {
    const counters = this.load();
    const last = counters.get(key);
    const seq = Math.max(last === undefined ? 1 : last + 1, atLeast);
    counters.delete(key); // re-inserted last: the most recently used
    counters.set(key, seq);
    this.save(counters);
    return seq;
  }
}
