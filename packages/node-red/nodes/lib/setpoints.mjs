/**
 * msg.payload checked as the `set` of a command before anything is sent: the contract's
 * shape (1..64 points, each a finite number) and a size that fits its 16 KiB request. Which
 * points exist, are writable and their limits, only the gateway knows: it answers
 * UNKNOWN_POINT, READ_ONLY_POINT or OUT_OF_RANGE.
 */
export const MAX_POINTS = 64;
/** Of the 16 KiB a request may take, what the setpoints may use (id, holder, token and seq need the rest). */
export const MAX_SET_BYTES = 12 * 1024;

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (Buffer.isBuffer(value)) return "a Buffer";
  if (typeof value === "string") return `a string (${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)})`;
  return typeof value === "object" ? "an object that is not plain" : `a ${typeof value} (${String(value)})`;
}

/**
 * A plain object of any realm: a function node runs in its own JavaScript context, so what it
 * builds has that context's Object.prototype, not this one's.
 */
function isPlainObject(value) {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  if (proto === null) return true;
  return (
    Object.getPrototypeOf(proto) === null &&
    Object.prototype.toString.call(value) === "[object Object]" &&
    typeof proto.constructor === "function" &&
    proto.constructor.name === "Object"
  );
}

/** `{ ok: true, set }` or `{ ok: false, message }`: one sentence naming what is wrong. */
export function checkSetpoints(payload) {
  if (!isPlainObject(payload)) {
    return { ok: false, message: `msg.payload must be an object of setpoints such as {"position": 42.5}; it is ${describe(payload)}.` };
  }
  const names = Object.keys(payload);
  if (names.length === 0) return { ok: false, message: 'msg.payload has no setpoints; send one or more, such as {"position": 42.5}.' };
  if (names.length > MAX_POINTS)
    return { ok: false, message: `msg.payload has ${names.length} setpoints; a command carries at most ${MAX_POINTS}.` };
  for (const name of names) {
    const value = payload[name];
    if (typeof value !== "number" || !Number.isFinite(value))
      return { ok: false, message: `Setpoint "${name}" must be a finite number; it is ${describe(value)}.` };
  }
  const bytes = Buffer.byteLength(JSON.stringify(payload));
  if (bytes > MAX_SET_BYTES)
    return { ok: false, message: `msg.payload takes ${bytes} bytes as JSON; a command's setpoints may take at most ${MAX_SET_BYTES}.` };
  return { ok: true, set: { ...payload } };
}
