/** Typed errors of the client library: every gateway refusal carries its contract code. */
import type { ErrorBody, ErrorCode, Fence, LeaseView } from "../../protocol/src/index.ts";

/** What the gateway said, verbatim, for a refusal (the `error` object of a reply). */
export type RefusalBody = ErrorBody;

/** Codes after which a lease can never be used again: re-read state, acquire anew. */
export const LEASE_ENDING_CODES: ReadonlySet<string> = new Set(["STALE_TOKEN", "LEASE_EXPIRED", "NOT_HOLDER", "UNKNOWN_TOKEN"]);

/** The gateway refused a request. `code` is the contract's; `fence` and `lease` say where things stand. */
export class FencegateError extends Error {
  override readonly name = "FencegateError";
  readonly code: ErrorCode;
  readonly fence: Fence | undefined;
  readonly lease: LeaseView | undefined;
  readonly original: unknown;
  readonly modbusCode: number | undefined;
  /** For OUTCOME_UNKNOWN: the state re-read after the failure, so the caller can decide. */
  state: unknown;

  constructor(body: RefusalBody) {
    super(`${body.code}: ${body.message}`);
    this.code = body.code;
    this.fence = body.fence;
    this.lease = body.lease;
    this.original = body.original;
    this.modbusCode = body.modbusCode;
  }

  /** True when the lease this came from is lost for good (see {@link LEASE_ENDING_CODES}). */
  get endsLease(): boolean {
    return LEASE_ENDING_CODES.has(this.code);
  }
}

/** No reply came in time, or the connection failed: the request may or may not have arrived. */
export class FencegateTimeoutError extends Error {
  override readonly name = "FencegateTimeoutError";
  readonly code = "TIMEOUT" as const;
}

/** The lease was lost before or while this was attempted; nothing was sent. */
export class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";
  readonly code = "LEASE_LOST" as const;
  /**
   * When the client itself saw the lease end, the contract code the gateway would give its
   * token now: STALE_TOKEN (a newer token took the actuator), LEASE_EXPIRED (no renewal got
   * through in time).
   */
  readonly contractCode: "STALE_TOKEN" | "LEASE_EXPIRED" | undefined;
  constructor(message: string, cause?: unknown, contractCode?: "STALE_TOKEN" | "LEASE_EXPIRED") {
    super(message, { cause });
    this.contractCode = contractCode;
  }
}
