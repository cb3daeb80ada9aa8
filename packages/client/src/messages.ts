/** The gateway's messages as the client reads them (their shapes: packages/protocol/src/messages.ts). */
import type { ContractState, StateExtensions } from "../../protocol/src/index.ts";

/** A retained state as a reader must take it: a gateway of another make may leave fencegate's extensions out. */
export type ActuatorState = ContractState & Partial<StateExtensions>;
