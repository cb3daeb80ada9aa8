/**
 * The scenario tier's harness: the real Gateway (src/shell/gateway.ts) on the simulator's
 * clock and ports (src/sim: the World's clock and scheduler, a SimJournal, SimDevicePorts
 * over SimActuators running the firmware bridge's own Device, a seeded Random), driven the
 * way the MQTT front end drives it: `Gateway.submit(actuator, ref, request)` with a request
 * of the wire protocol. Nothing sleeps and no real timer runs: simulated time moves only
 * when a scenario advances it, and every event's promise chains settle before the next.
 *
 * A crash drops the Gateway and everything it had in flight (its timers never fire, its
 * device answers never arrive) and starts a new one over what the journal synced, as
 * src/sim/run.ts does; a frame already on the line still reaches its device.
 */
import type { GatewayRequest } from "../../packages/protocol/src/index.ts";
import { FENCED, encodeCommandBlock } from "../../packages/protocol/src/modbus-profile.ts";
import type { CoreEvent, ExpiryPolicy, PointValues } from "../../src/core/types.ts";
import type { Gateway } from "../../src/shell/gateway.ts";
import type { DeviceCommand, OutboundReply, Random, StateView } from "../../src/shell/ports.ts";
import { SimActuator, SimDevicePort, type LineFaults } from "../../src/sim/device.ts";
import { SimJournal, type CommitCrash, type JournalHooks } from "../../src/sim/journal.ts";
import { Prng } from "../../src/sim/prng.ts";
import { World } from "../../src/sim/world.ts";
import { startInProcessGateway } from "../support/in-process-gateway.ts";

export interface ScenarioActuator {
  readonly id: string;
  readonly profile: "fenced" | "plain";
  readonly expiryPolicy?: ExpiryPolicy;
}

export interface ScenarioOptions {
  /** Default: one fenced valve, `valve-1`, held at expiry. */
  readonly actuators?: readonly ScenarioActuator[];
  readonly seed?: number;
}

const VALVE = "valve-1";

/** Each leg of a line transaction takes 1..5 ms, so a device answer times out after 20 ms (SimDevicePort). */
const LINE: LineFaults = { latencyMaxMs: 5, pLostAnswer: 0, pCrc: 0, pPowerLoss: 0 };
/** Polls notice a device going away or coming back within a second. */
const POLL_INTERVAL_MS = 1_000;
const RECENT_LIMIT = 8;
/** A command's deadline when it names none. */
const DEFAULT_DEADLINE_MS = 1_000;
/** Long enough for the first poll and a fenced device's fence read (a few 10 ms transactions). */
const START_MS = 100;
/** How long `ask` waits for a reply before the scenario fails. */
const ASK_LIMIT_MS = 5_000;

interface Process {
  alive: boolean;
  readonly journal: SimJournal;
  readonly gateway: Gateway;
}

/** One actuator's device as it acted: the API (token, seq) of each command it carried out, and where it went. */
export interface Acted {
  readonly token: number;
  readonly seq: number;
  readonly position: number;
}

export class Scenario {
  private readonly world = new World(100_000);
  private readonly actuators: readonly ScenarioActuator[];
  /** The physical units: they outlive every gateway process. */
  private readonly units: ReadonlyMap<string, SimActuator>;
  /** Every reply, by the ref its request was submitted under (refs count on across restarts). */
  readonly replies = new Map<number, OutboundReply>();
  private readonly events: { readonly actuator: string; readonly event: CoreEvent }[] = [];
  readonly states: StateView[] = [];
  /** Every command the gateway handed to a device port, whatever became of it. */
  readonly writes: (DeviceCommand & { readonly actuator: string })[] = [];
  /** One line per thing the world saw, in order: journal records durable, replies, device writes. */
  readonly log: string[] = [];
  /** What a live process found fatal (a journal commit that failed): said when a reply never comes. */
  private readonly fatal: unknown[] = [];
  /** Decides, per journal commit, whether the process dies at it (SimJournal's hook); by default never. */
  crashAt: (records: readonly string[]) => CommitCrash = () => null;
  private readonly line = new Map<string, LineFaults>();
  private readonly acted = new Map<string, Acted[]>();
  private readonly rng: Prng;
  private readonly random: Random;
  private current: Process;
  private nextRef = 1;

  private constructor(options: ScenarioOptions) {
    this.actuators = options.actuators ?? [{ id: VALVE, profile: "fenced" }];
    this.rng = new Prng(options.seed ?? 1);
    const secrets = this.rng.fork();
    this.random = { bytes: (n) => Uint8Array.from({ length: n }, () => secrets.int(0, 255)) };
    this.units = new Map(this.actuators.map((a, i) => [a.id, new SimActuator(a.id, a.profile, this.world, i + 1)]));
    for (const [id, unit] of this.units) {
      this.line.set(id, { ...LINE });
      const acted: Acted[] = [];
      this.acted.set(id, acted);
      unit.onApplied = (token, seq) => acted.push({ token, seq, position: unit.device.applied.at(-1)?.setpoints.position ?? NaN });
    }
    const hooks: JournalHooks = {
      crashAt: (entries) => this.crashAt(entries.map((e) => describeRecord(e.record))),
      onDurable: (entries) => {
        for (const e of entries) this.log.push(`durable ${e.actuator} ${describeRecord(e.record)}`);
      },
      crash: () => this.crash(),
    };
    this.current = this.startProcess(SimJournal.open(RECENT_LIMIT, hooks));
  }

  /** A gateway started over a fresh journal, its devices answering and their fences read. */
  static async start(options: ScenarioOptions = {}): Promise<Scenario> {
    const scenario = new Scenario(options);
    await scenario.advance(START_MS);
    return scenario;
  }

  /** What the gateway shows of an actuator now (its retained state, /status). */
  view(actuator = VALVE): StateView {
    return this.current.gateway.view(actuator)!;
  }

  /** Runs every event due in the next `ms` of simulated time. */
  advance(ms: number): Promise<void> {
    return this.world.run(this.world.nowMs + ms);
  }

  /** Hands `request` to the running gateway, as the MQTT front end does; returns its ref. */
  submit(request: GatewayRequest, actuator = VALVE): number {
    const ref = this.nextRef++;
    this.log.push(`submit ${ref} ${actuator} ${JSON.stringify(request)}`);
    this.current.gateway.submit(actuator, ref, request);
    return ref;
  }

  /** Submits `request` and runs time on, a millisecond at a time, until it is answered. */
  async ask(request: GatewayRequest, actuator = VALVE): Promise<OutboundReply> {
    const ref = this.submit(request, actuator);
    return this.answer(ref);
  }

  /** Runs time on until `ref` is answered; fails the scenario if it is not within a few seconds. */
  async answer(ref: number): Promise<OutboundReply> {
    const limit = this.world.nowMs + ASK_LIMIT_MS;
    while (!this.replies.has(ref)) {
      if (this.world.nowMs >= limit)
        throw new Error(`no reply to request ${ref} within ${ASK_LIMIT_MS} ms (fatal: ${String(this.fatal)}):\n${this.log.join("\n")}`);
      await this.advance(1);
    }
    return this.replies.get(ref)!;
  }

  acquire(holder: string, ttlMs: number, actuator = VALVE): Promise<OutboundReply> {
    return this.ask({ verb: "lease/acquire", holder, ttlMs }, actuator);
  }

  renew(holder: string, token: number, actuator = VALVE): Promise<OutboundReply> {
    return this.ask({ verb: "lease/renew", holder, token }, actuator);
  }

  release(holder: string, token: number, actuator = VALVE): Promise<OutboundReply> {
    return this.ask({ verb: "lease/release", holder, token }, actuator);
  }

  command(holder: string, token: number, seq: number, set: PointValues, actuator = VALVE): Promise<OutboundReply> {
    return this.ask({ verb: "command", holder, token, seq, set }, actuator);
  }

  read(actuator = VALVE): Promise<OutboundReply> {
    return this.ask({ verb: "read" }, actuator);
  }

  /** The events of `type` the gateway published, oldest first. */
  eventsOf(type: CoreEvent["type"], actuator = VALVE): CoreEvent[] {
    return this.events.filter((e) => e.actuator === actuator && e.event.type === type).map((e) => e.event);
  }

  /** What the device carried out, by the API's (token, seq). */
  actedOn(actuator = VALVE): readonly Acted[] {
    return this.acted.get(actuator)!;
  }

  /** The fence token the device itself stores (fenced profile; 0 for a plain one). */
  deviceFence(actuator = VALVE): number {
    return this.units.get(actuator)!.device.snapshot(this.world.nowMs).fence.token;
  }

  /** Where the device is set now. */
  devicePosition(actuator = VALVE): number {
    return this.units.get(actuator)!.device.snapshot(this.world.nowMs).targetPosition;
  }

  /** The bus to the device goes down (every transaction fails DEVICE_UNAVAILABLE, unsent), or comes back. */
  setLinkDown(down: boolean, actuator = VALVE): void {
    this.units.get(actuator)!.busDown = down;
  }

  /** The device still acts on every request, but its answers are lost (each a timeout), or arrive again. */
  dropAnswers(drop: boolean, actuator = VALVE): void {
    this.line.set(actuator, { ...this.line.get(actuator)!, pLostAnswer: drop ? 1 : 0 });
  }

  /**
   * Someone other than this gateway drives a fenced device (another gateway over a copy of
   * this journal): a command block under `token`, straight into the unit's register map.
   */
  writeFromElsewhere(token: number, position: number, actuator = VALVE): void {
    const block = encodeCommandBlock({ token, seq: 0, setpoints: { position } });
    const refused = this.units.get(actuator)!.device.write(FENCED.COMMAND_START, block, 16, this.world.nowMs);
    if (refused !== undefined) throw new Error(`the device refused token ${token}: exception ${refused.exception}`);
  }

  /** The gateway process dies now: nothing it had in flight is carried out or answered. */
  crash(): void {
    if (!this.current.alive) return;
    this.current.alive = false;
    this.log.push("crash");
  }

  /**
   * A new gateway process over exactly what the journal synced (after a crash, or crashing
   * the running one first), its devices answering and their fences read.
   */
  async restart(): Promise<void> {
    this.crash();
    this.current = this.startProcess(this.current.journal.reopen());
    await this.advance(START_MS);
  }

  private startProcess(journal: SimJournal): Process {
    const self: { p: Process | null } = { p: null };
    const alive = () => self.p?.alive === true;
    /** What runs on this process's behalf (its timers, the line's answers): never once it died. */
    const enter = (fn: () => void) => {
      if (alive()) fn();
    };
    const devices = new Map(
      this.actuators.map(({ id }) => [
        id,
        new SimDevicePort(this.units.get(id)!, this.world, this.rng, () => this.line.get(id)!, {
          enter,
          onUnit: (online) => {
            if (alive()) self.p!.gateway.linkChanged(id, online);
          },
          beforeWrite: (cmd) => {
            if (!alive()) return;
            this.writes.push({ actuator: id, ...cmd });
            this.log.push(`write ${id} ${cmd.holder} (${cmd.token}, ${cmd.seq}) ${JSON.stringify(cmd.set)}`);
          },
          afterAct: () => {},
          fault: (kind) => this.log.push(`fault ${id} ${kind}`),
        }),
      ]),
    );
    const gateway = startInProcessGateway({
      journal,
      snapshots: journal.load(),
      devices,
      valves: new Map(this.actuators.map((a) => [a.id, { fenced: a.profile === "fenced", expiryPolicy: a.expiryPolicy }])),
      // The ports report their units online once they answer, as the bus does.
      linksUp: false,
      limits: { recentLimit: RECENT_LIMIT },
      pollIntervalMs: POLL_INTERVAL_MS,
      defaultDeadlineMs: DEFAULT_DEADLINE_MS,
      clock: this.world.clock,
      scheduler: this.world.schedulerFor(enter),
      random: this.random,
      onFatal: (err) => {
        if (alive()) this.fatal.push(err);
      },
      outbox: {
        reply: (ref, reply) => {
          if (!alive()) return;
          this.replies.set(ref, reply);
          this.log.push(`reply ${ref} ${reply.ok ? "ok" : reply.error.code}`);
        },
        // Without the wall time, which is only for humans.
        event: (actuator, { at: _at, ...event }) => {
          if (alive()) this.events.push({ actuator, event });
        },
        state: (view) => {
          if (alive()) this.states.push(view);
        },
      },
    });
    self.p = { alive: true, journal, gateway };
    this.log.push("start");
    return self.p;
  }
}

function describeRecord(record: {
  readonly type: string;
  readonly holder?: string;
  readonly token?: number;
  readonly seq?: number | null;
}) {
  return [record.type, record.holder, record.token, record.seq].filter((x) => x !== undefined && x !== null).join(" ");
}
