/**
 * Actuators nothing serves any more, whose retained state would otherwise go on saying
 * what their last gateway last said (online, a lease): an actuator taken out of the
 * configuration, or in a gateway group one the group has granted tokens on that the active
 * gateway does not serve. The gateway that publishes states (alone, or the group's active
 * one) publishes theirs as offline with no lease and a problem naming why, once connected
 * and again at each takeover (docs/mqtt-api.md, "Actuators no gateway serves"). Never one
 * another gateway on the broker serves: moving an actuator between gateways is routine.
 */
import { compareFence } from "../core/actuator.ts";
import type { Fence } from "../core/types.ts";
import type { Clock, StateView } from "./ports.ts";

/** The most actuators one gateway speaks for this way: a bound on what a journal or etcd can make it publish. */
export const MAX_UNSERVED_ACTUATORS = 256;

interface Unserved {
  fence: Fence;
  /** Where this gateway knows the actuator from, for the problem sentence. */
  source: "journal" | "group";
}

export class UnservedActuators {
  private readonly known = new Map<string, Unserved>();
  private readonly servedElsewhere = new Set<string>();

  constructor(
    private readonly gatewayId: string,
    private readonly served: ReadonlySet<string>,
    private readonly clock: Clock,
    /** The journal's durable fence of every actuator it holds. */
    journal: ReadonlyMap<string, { readonly fence: Fence }>,
    private readonly group?: string,
  ) {
    for (const [actuator, { fence }] of journal) this.add(actuator, fence, "journal");
  }

  /** Actuators another gateway on the broker serves (its directory or its answer to the presence probe). */
  servedByOthers(actuators: Iterable<string>): void {
    for (const a of actuators) this.servedElsewhere.add(a);
  }

  /** A group's highest granted token of each actuator it has granted on (read from etcd at takeover). */
  groupTokens(tokens: ReadonlyMap<string, number>): void {
    for (const [actuator, token] of tokens) this.add(actuator, { token, seq: null }, "group");
  }

  /** The retained states to publish, in actuator order. */
  views(): StateView[] {
    const at = this.clock.wallNow();
    return [...this.known]
      .filter(([actuator]) => !this.servedElsewhere.has(actuator))
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([actuator, { fence, source }]) => ({
        actuator,
        online: false,
        lease: null,
        fence,
        points: {},
        pointsAgeMs: null,
        gateway: this.gatewayId,
        safeWrite: null,
        pointFaults: {},
        problem: this.problem(source),
        at,
      }));
  }

  private add(actuator: string, fence: Fence, source: Unserved["source"]): void {
    if (this.served.has(actuator)) return;
    const was = this.known.get(actuator);
    if (was === undefined && this.known.size >= MAX_UNSERVED_ACTUATORS) return;
    if (was === undefined || compareFence(fence, was.fence) > 0) this.known.set(actuator, { fence, source: was?.source ?? source });
  }

  private problem(source: Unserved["source"]): string {
    const where =
      source === "journal"
        ? `its journal holds it, and it is not in the configuration of gateway ${this.gatewayId}`
        : `gateway group ${this.group} has granted tokens on it, and it is not in the configuration of its active gateway ${this.gatewayId}`;
    return `no gateway serves this actuator: ${where}; requests to it get no reply. Add it to a gateway's configuration to serve it again.`;
  }
}
