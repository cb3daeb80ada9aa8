/**
 * The broker and network between controllers and the gateway, per controller: every
 * message is delayed (so messages overtake each other), may be dropped or duplicated, and
 * a partitioned controller neither sends nor receives. Faults apply while `faulty()`.
 */
import type { Prng } from "./prng.ts";
import type { World } from "./world.ts";

export interface NetFaults {
  readonly delayMaxMs: number;
  readonly pDrop: number;
  readonly pDuplicate: number;
}

export class NetLink {
  partitionedUntilMs = 0;
}

export class Network {
  constructor(
    private readonly world: World,
    private readonly rng: Prng,
    private readonly faults: NetFaults,
    private readonly faulty: () => boolean,
    private readonly fault: (kind: string) => void,
  ) {}

  /** Carries one message over `link`; `deliver` runs at the far end, once or (duplicated) twice. */
  send(link: NetLink, deliver: () => void): void {
    const { world, rng, faults } = this;
    const faulty = this.faulty();
    if (faulty && world.nowMs < link.partitionedUntilMs) {
      this.fault("net.partitionDrop");
      return;
    }
    if (faulty && rng.chance(faults.pDrop)) {
      this.fault("net.drop");
      return;
    }
    // A partition that begins while the message is on its way cuts it too.
    const arrive = () => (this.faulty() && world.nowMs < link.partitionedUntilMs ? this.fault("net.partitionDrop") : deliver());
    world.after(rng.int(1, faults.delayMaxMs), arrive);
    if (faulty && rng.chance(faults.pDuplicate)) {
      this.fault("net.duplicate");
      world.after(rng.int(1, 4 * faults.delayMaxMs), arrive);
    }
  }
}
