/**
 * What a Lease needs of the client that made it: requests, the retained state's topic, and
 * whether the connection was remade. FencegateClient is one; a Lease knows nothing else of it.
 */
import type { RefusalBody } from "./errors.ts";
import type { ActuatorState } from "./messages.ts";
import type { RequestVerb } from "../../protocol/src/index.ts";

/** A reply to one request: `ok` with the verb's fields, or the refusal. */
export type Reply = { id: string; ok: boolean; error?: RefusalBody } & Record<string, unknown>;

export interface LeaseTransport {
  /** The API's base topic. */
  readonly base: string;
  /** The holder id every request carries. */
  readonly holder: string;
  /** Connections made so far (1 + reconnects): after a reconnect a request may have been delivered twice. */
  readonly connections: number;
  /**
   * Sends one request and resolves with the success reply, or rejects with FencegateError
   * (the gateway refused) or FencegateTimeoutError (no reply in time). `id` lets a retry
   * reuse the same request id.
   */
  request(
    actuator: string,
    verb: RequestVerb,
    body: Record<string, unknown>,
    options?: { id?: string; timeoutMs?: number },
  ): Promise<Reply>;
  /** Calls `listener` with every JSON message on `filter`; resolves with the unsubscribe. */
  subscribe(filter: string, listener: (topic: string, body: unknown) => void): Promise<() => Promise<void>>;
  /** A fresh read of the device, the lease and the fence. */
  read(actuator: string): Promise<ActuatorState>;
}
