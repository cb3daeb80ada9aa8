/** Names as the contract allows them (docs/mqtt-api.md): what a controller may check before asking. */

/** An actuator id. */
export const ACTUATOR_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** A holder id. */
export const HOLDER_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
