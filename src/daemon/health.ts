/**
 * The daemon's health: its own problems (they gate the systemd watchdog), and the wider rule
 * `/healthz` answers with. See docs/deploy.md for what each means to an operator.
 */
import type { HealthSource } from "../adapters/http/metrics.ts";
import type { EtcdGroupMember } from "../adapters/etcd/member.ts";
import type { JournalThread } from "../adapters/journal/worker-client.ts";
import type { ModbusBus } from "../adapters/modbus/bus.ts";
import type { MqttLink } from "../adapters/mqtt/link.ts";
import { realClock } from "../adapters/platform.ts";
import { EXIT } from "../exit-codes.ts";
import type { Gateway } from "../shell/gateway.ts";

/** Where the daemon is in its life, and the exit code it must stop with by itself, once known. */
export class Lifecycle {
  stopping = false;
  journalFailed = false;
  /** Resolves with an exit code when the daemon must stop by itself. */
  readonly fatal: Promise<number>;
  private resolveFatal: (code: number) => void = () => {};

  constructor(private readonly journal: JournalThread) {
    this.fatal = new Promise<number>((resolve) => (this.resolveFatal = resolve));
  }

  failJournal(): void {
    this.journalFailed = true;
    this.resolveFatal(EXIT.JOURNAL);
  }

  /** Another gateway serves as this one would (a duplicate id, an actuator of ours): a configuration problem. */
  refuseToServe(): void {
    this.resolveFatal(EXIT.CONFIG);
  }

  /** Why the daemon is not healthy (stopping, journal failed or not answering), or null: gates the systemd watchdog. */
  problem(): string | null {
    if (this.stopping) return "the gateway is shutting down";
    if (this.journalFailed) return "the journal failed";
    const problem = this.journal.problem();
    return problem === null ? null : `the journal cannot commit: ${problem}`;
  }
}

/** Records handed to the journal and not yet durable (mostly the audit trail), the oldest's age, and the commits made. */
export function journalLag(gateway: Gateway): ReturnType<HealthSource["journalLag"]> {
  const { records, oldestAtMs } = gateway.committer.backlog();
  return { records, oldestMs: oldestAtMs === null ? 0 : realClock.monotonicMs() - oldestAtMs, commits: gateway.committer.commits };
}

export interface HealthParts {
  readonly lifecycle: Lifecycle;
  readonly gateway: Gateway;
  readonly link: MqttLink;
  readonly buses: ReadonlyMap<string, ModbusBus>;
  readonly member: EtcdGroupMember | null;
}

export function healthSource({ lifecycle, gateway, link, buses, member }: HealthParts): HealthSource {
  return {
    // /healthz: the daemon's own problems, and no bus open at all (it cannot reach a single
    // device). One bus or device down is in the details, not a 503: the rest still serve.
    // Not the watchdog's rule: an unplugged adapter must not get the daemon restarted.
    // A group's standby opens no bus, by design.
    // A group member that has not reached etcd for longer than a TTL cannot tell whether
    // anything serves; one whose actuators differ from another member's will not take over.
    // A saturated audit queue is a 503 (commands are refused), not the watchdog's: a slow
    // disk must not get the daemon restarted.
    problem: () =>
      lifecycle.problem() ??
      member?.etcdProblem() ??
      member?.configProblem() ??
      gateway.committer.saturation() ??
      (gateway.serving && buses.size > 0 && [...buses.values()].every((b) => !b.isUp)
        ? `no bus is open (${[...buses.keys()].join(", ")}): no device can be reached`
        : null),
    details: () => ({
      ...(member ? { group: member.phase } : {}),
      mqtt: link.connected,
      buses: Object.fromEntries([...buses].map(([name, b]) => [name, b.isUp])),
      actuators: Object.fromEntries(gateway.actuatorIds().map((id) => [id, gateway.view(id)?.online ?? false])),
    }),
    queueDepths: () => gateway.actuatorIds().map((id) => [id, gateway.state(id)?.queue.length ?? 0] as [string, number]),
    linkStates: () => gateway.actuatorIds().map((id) => [id, gateway.state(id)?.online ?? false] as [string, boolean]),
    pointFaults: () => gateway.actuatorIds().map((id) => [id, Object.keys(gateway.view(id)?.pointFaults ?? {}).length] as [string, number]),
    journalLag: () => journalLag(gateway),
  };
}
