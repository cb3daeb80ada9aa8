/**
 * Whether the gateway may still decide, and whether it serves: the two facts every
 * actuator's runtime asks before it acts. The gateway owns one and hands it to each runtime,
 * which asks it instead of asking the gateway (docs/architecture.md: no piece of the shell
 * holds its owner).
 */
import type { Logger } from "pino";
import type { Clock } from "./ports.ts";

export class GatewayLife {
  private fatalError: unknown = null;
  /** Alone: always. In a gateway group: while this gateway is the active one. */
  serving: boolean;

  constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly onFatal: (err: unknown) => void,
    alone: boolean,
  ) {
    this.serving = alone;
  }

  /** Runs `fn` at the current time, unless a commit has failed: then nothing more is decided. */
  enter(fn: (nowMs: number) => void): void {
    if (this.fatalError !== null) return;
    fn(this.clock.monotonicMs());
  }

  /** A commit failed: the daemon is stopping, and nothing more is decided or carried out. */
  get stopped(): boolean {
    return this.fatalError !== null;
  }

  fatal(err: unknown): void {
    if (this.fatalError !== null) return;
    this.fatalError = err;
    this.log.fatal({ err }, "the journal could not commit; stopping all decisions");
    this.onFatal(err);
  }
}
