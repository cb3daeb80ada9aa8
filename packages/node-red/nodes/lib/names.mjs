/**
 * Names as the contract allows them (the controller package's patterns), and the holder id
 * a node uses when its connection names none: derived from the host and the flow (the
 * editor tab) the node sits on.
 */
export { ACTUATOR_PATTERN, HOLDER_PATTERN } from "fencegate-client";

/** `text` with every run of characters a holder id cannot carry replaced by one "-". */
function holderPart(text) {
  return String(text ?? "")
    .replace(/[^A-Za-z0-9._:-]+/g, "-")
    .replace(/^-+|-+$/g, "");
}

/**
 * `<host>.<flow name>`, e.g. `pump-house-pi.Valve-1-primary`: stable across restarts and
 * redeploys (so a restarted Node-RED gets its own live lease back), distinct per flow. Two
 * Node-RED instances on hosts of the same name with flows of the same name would be one
 * holder: name the holder in the connection for anything but a trial.
 */
export function holderFromFlow(hostname, flowName, flowId) {
  const flow = holderPart(flowName) || holderPart(flowId) || "flow";
  return `${holderPart(hostname) || "node-red"}.${flow}`.slice(0, 128);
}
