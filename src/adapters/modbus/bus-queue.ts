/**
 * The transactions waiting for one bus, and which goes on the wire next.
 *
 * Two classes. Commands: a command's device write and the reads it needs before it, the
 * safe write, the fence reads and raises that leases wait for. Polls: the regular reads of
 * the points (with a fenced device's keep-alive), and the read-backs after commands.
 *
 * The rule: a command waits only for the transaction already on the wire (never aborted:
 * RTU needs its frames whole and the silence between them), then goes ahead of every waiting
 * poll. Polls get the line time commands leave; the state's `pointsAgeMs` says how old the
 * points are. So that a line saturated by commands still reads its devices (their points,
 * a fenced device's keep-alive against its watchdog), a waiting poll goes after at most
 * {@link COMMANDS_AHEAD_OF_A_POLL} commands in a row: such a line gives commands at least
 * 4/5 of its transactions. Within a class the units take turns (round-robin), each with its
 * own queue bounded to `limitPerUnit`.
 */
export type TransactionClass = "command" | "poll";

/** Commands that may go in a row while a poll waits; then the poll goes. */
export const COMMANDS_AHEAD_OF_A_POLL = 4;

/** Per unit, one class's waiting transactions, served in turn across the units. */
class RoundRobin<J> {
  private readonly queues = new Map<number, J[]>();
  private readonly units: number[] = [];
  private rotation = 0;
  waiting = 0;

  addUnit(unit: number): void {
    if (this.queues.has(unit)) return;
    this.queues.set(unit, []);
    this.units.push(unit);
  }

  queue(unit: number): J[] | undefined {
    return this.queues.get(unit);
  }

  push(queue: J[], job: J): void {
    queue.push(job);
    this.waiting++;
  }

  next(): { unit: number; job: J } | undefined {
    if (this.waiting === 0) return undefined;
    for (let i = 0; i < this.units.length; i++) {
      const unit = this.units[(this.rotation + i) % this.units.length]!;
      const job = this.queues.get(unit)!.shift();
      if (job !== undefined) {
        this.rotation = (this.rotation + i + 1) % this.units.length;
        this.waiting--;
        return { unit, job };
      }
    }
    return undefined;
  }

  drain(): J[] {
    this.waiting = 0;
    return [...this.queues.values()].flatMap((q) => q.splice(0));
  }
}

export class BusQueue<J> {
  private readonly classes = { command: new RoundRobin<J>(), poll: new RoundRobin<J>() };
  /** Commands sent in a row while a poll waited. */
  private commandsAheadOfPoll = 0;

  constructor(private readonly limitPerUnit: number) {}

  addUnit(unit: number): void {
    this.classes.command.addUnit(unit);
    this.classes.poll.addUnit(unit);
  }

  has(unit: number): boolean {
    return this.classes.command.queue(unit) !== undefined;
  }

  /** Queues `job`; when that unit already has `limitPerUnit` of the class waiting, says how many instead. */
  push(unit: number, kind: TransactionClass, job: J): { queued: true } | { queued: false; waiting: number } {
    const rr = this.classes[kind];
    const queue = rr.queue(unit);
    if (queue === undefined) throw new Error(`unit ${unit} was never added`);
    if (queue.length >= this.limitPerUnit) return { queued: false, waiting: queue.length };
    rr.push(queue, job);
    return { queued: true };
  }

  /** The transaction to put on the wire now, if any waits. */
  next(): { unit: number; kind: TransactionClass; job: J } | undefined {
    const { command, poll } = this.classes;
    const pollOwed = poll.waiting > 0 && this.commandsAheadOfPoll >= COMMANDS_AHEAD_OF_A_POLL;
    const next = pollOwed ? undefined : command.next();
    if (next !== undefined) {
      if (poll.waiting > 0) this.commandsAheadOfPoll++;
      return { ...next, kind: "command" };
    }
    const polled = poll.next();
    if (polled === undefined) return undefined;
    this.commandsAheadOfPoll = 0;
    return { ...polled, kind: "poll" };
  }

  /** Every waiting transaction, taken out (the bus went down or was closed). */
  drain(): J[] {
    this.commandsAheadOfPoll = 0;
    return [...this.classes.command.drain(), ...this.classes.poll.drain()];
  }
}
