/** Names as the contract allows them (docs/mqtt-api.md): what a controller may check before asking. */

/**
 * An actuator id: one topic level. Gateway ids, bus names and group names follow the same
 * rule, since each becomes a topic level or a key beside one.
 */
export const ACTUATOR_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** A holder id. */
export const HOLDER_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

/** A request's `id`: printable ASCII, echoed in the reply. */
export const REQUEST_ID_PATTERN = /^[\x20-\x7e]{1,128}$/;

/**
 * A point name on the wire: a key of a command's `set`. Wider than what a configuration may
 * name ({@link CONFIGURED_POINT_NAME_PATTERN}) on purpose: a well-formed name no actuator can
 * have is answered UNKNOWN_POINT, which names it, rather than INVALID_REQUEST.
 */
export const POINT_NAME_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/** A point name a configuration may give: a letter first, no ".". */
export const CONFIGURED_POINT_NAME_PATTERN = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

/**
 * A point name the wire accepts: {@link POINT_NAME_PATTERN}, and not a member of
 * Object.prototype (`__proto__`, `constructor`, `toString`…): legal-looking, but a lookup by
 * such a name in any plain object downstream finds Object.prototype's member.
 */
export function isPointName(name: string): boolean {
  return POINT_NAME_PATTERN.test(name) && !(name in Object.prototype);
}
