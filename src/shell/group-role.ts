/**
 * One actuator's part in a gateway group (docs/architecture.md, "Gateway group"): its grants
 * count only once the group has them too, the inputs after a grant the group has not settled
 * wait for it, and in each term the actuator is taken over before any lease is granted.
 *
 * The actuator's runtime (actuator-runtime.ts) feeds it and asks it; it holds no reference back. A
 * takeover needs a few steps of the runtime, handed in for that call only ({@link TakeoverSteps}).
 */
import type { Logger } from "pino";
import { GATEWAY_HOLDER } from "../core/actuator.ts";
import type { Input } from "../core/types.ts";
import type { DevicePort, GrantCommit, GroupPort } from "./ports.ts";

/** What a takeover asks of the actuator's runtime while it runs. */
export interface TakeoverSteps {
  /** Resolves when every effect handed out so far has been carried out. */
  settled(): Promise<void>;
  /** Whether the takeover may still go on: this gateway serves and the actuator is not stopped. */
  serving(): boolean;
  /** Decides the takeover above `floor` (core/actuator.ts, takeover); returns the token it grants. */
  takeover(floor: number): number;
  /** The fence the core holds now: after the takeover's step, its token if that step was carried out. */
  fenceToken(): number;
  /** The takeover succeeded: the device's fence is now the core's. */
  takenOver(): void;
}

export class ActuatorGroupRole {
  /** Taken over in this term (the group's token and the device's fence raised). */
  secured = false;
  private securing: Promise<boolean> | null = null;
  /** The highest token the group confirmed for this actuator. */
  private committed = 0;
  /** Steps whose grant the group has not yet confirmed or refused. */
  private unsettled = 0;
  /** Inputs that arrived meanwhile, decided in order once no grant is unsettled. */
  private readonly waiting: Input[] = [];

  constructor(
    private readonly actuator: string,
    private readonly device: DevicePort,
    private readonly fenced: boolean,
    private readonly group: GroupPort,
    private readonly log: Logger,
  ) {}

  /**
   * Keeps `input` back while a grant is unsettled (true), to be handed out by {@link released}:
   * the core's state already counts the grant, and a retried acquire, say, would otherwise be
   * answered as the live holder's with a token that etcd then refuses (and another gateway may hand out).
   */
  holds(input: Input): boolean {
    if (this.unsettled === 0) return false;
    this.waiting.push(input);
    return true;
  }

  /** A step that grants is being carried out: the inputs after it wait until {@link grantSettled}. */
  grantStarted(): void {
    this.unsettled++;
  }

  /** The group confirmed or refused a grant (and the refusal was decided on). */
  grantSettled(): void {
    this.unsettled--;
  }

  /** The next input kept back, now that no grant is unsettled, or undefined. */
  released(): Input | undefined {
    return this.unsettled === 0 ? this.waiting.shift() : undefined;
  }

  /** Commits the step's highest grant to the group; it counts as confirmed once this resolves ok. */
  async commit(token: number): Promise<GrantCommit> {
    const commit = await this.group.commitGrant(this.actuator, token);
    if (commit.ok) this.committed = Math.max(this.committed, token);
    return commit;
  }

  /** The group refused a grant: a refusal saying another gateway leads makes this one stand down. */
  refused(commit: Extract<GrantCommit, { ok: false }>): void {
    if (commit.stale) this.group.stale(`${this.actuator}: ${commit.message}`);
  }

  /**
   * The device refused token `token` (0x46): in a group a newer token at the device means
   * another gateway took over, so this one is stale and steps down (no more frames).
   */
  deviceRefused(token: number): void {
    this.group.stale(`the device of ${this.actuator} refused token ${token} (0x46): another gateway has raised its fence`);
  }

  /**
   * Takes this actuator over, before any lease is granted: read the device's fence, take a
   * token of the gateway's own above it, the group's counter and the journal (durable in the
   * journal and, through the leadership-checked transaction, in etcd), then raise the
   * device's fence to it. From then on the device refuses every write of the deposed
   * gateway. Until this succeeds, acquires are refused (core/admission.ts). One at a time.
   */
  secure(steps: TakeoverSteps): Promise<boolean> {
    this.securing ??= this.secureOnce(steps).finally(() => {
      this.securing = null;
    });
    return this.securing;
  }

  /** No longer active: the next term takes the actuator over afresh. */
  standDown(): void {
    this.secured = false;
  }

  private async secureOnce(steps: TakeoverSteps): Promise<boolean> {
    const { log, device, fenced, actuator } = this;
    try {
      const deviceFence = fenced ? await device.readFence() : null;
      const groupToken = await this.group.readToken(actuator);
      // A grant of an earlier term still unsettled would hold the takeover back: wait it out.
      while (this.unsettled > 0) await steps.settled();
      if (!steps.serving()) return false;
      const token = steps.takeover(Math.max(deviceFence?.token ?? 0, groupToken));
      await steps.settled();
      if (this.committed < token || steps.fenceToken() !== token) return false; // not confirmed: said and logged already
      if (fenced) {
        if (device.raiseFence === undefined) throw new Error("this device adapter cannot raise a fence");
        const raised = await device.raiseFence(token);
        if (raised.kind === "refused") this.group.stale(`${actuator}: ${raised.message}`);
        if (raised.kind !== "raised") {
          log.warn(
            { actuator, token, result: raised.kind, reason: raised.message },
            "could not raise the device's fence; no lease is granted until it is raised",
          );
          return false;
        }
      }
      steps.takenOver();
      this.secured = true;
      log.info(
        { actuator, token, deviceToken: deviceFence?.token ?? null, groupToken, holder: GATEWAY_HOLDER },
        fenced ? "device fence raised" : "actuator taken over",
      );
      return true;
    } catch (err) {
      log.warn({ actuator, err }, "could not take the actuator over yet; leases stay unavailable until it is");
      return false;
    }
  }
}
