/**
 * fencegate-client: the controller library (packages/client builds it from these sources).
 *
 *   const client = await FencegateClient.connect({ url: "mqtt://gateway.local", holder: "line-2-primary" });
 *   const lease = await client.acquire("valve-1", { ttlMs: 5000 });
 *   lease.on("lost", (why) => ...);            // stop acting on this actuator at once
 *   await lease.command({ position: 42.5 });  // resolves once the device applied it
 */
export { brokerAddress, FencegateClient, type ClientOptions, type WatchItem } from "./client.ts";
export { FencegateError, FencegateTimeoutError, LeaseLostError, LEASE_ENDING_CODES, type RefusalBody } from "./errors.ts";
export {
  ACTUATOR_PATTERN,
  HOLDER_PATTERN,
  withGatewayStatus,
  type EventMessage as ActuatorEvent,
  type Fence as FenceView,
  type GatewayStatus,
  type LeaseView as LeaseHolderView,
} from "../../protocol/src/index.ts";
export type { ActuatorState } from "./messages.ts";
export { DEFAULT_TTL_MS, Lease, type Applied, type CommandOptions, type LeaseOptions } from "./lease.ts";
