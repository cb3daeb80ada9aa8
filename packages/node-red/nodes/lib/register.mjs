/**
 * The four node types: fencegate-broker (config: broker, TLS, credentials, base topic,
 * holder), fencegate-lease, fencegate-command and fencegate-state.
 *
 * How a command node finds its lease: a lease belongs to a holder and an actuator, as at
 * the gateway. The broker config node keeps one register of lease keepers by (holder,
 * actuator); a lease node claims its entry, a command node with the same broker config and
 * actuator (and so the same holder) looks it up when a message arrives. No wire between
 * them: they may sit anywhere in the flow, and a command finds no lease when none is held.
 */
import { hostname } from "node:os";
import { FencegateError, FencegateTimeoutError, LeaseLostError } from "fencegate-client";
import { Connections } from "./connections.mjs";
import { codeOf, LeaseKeeper } from "./lease-keeper.mjs";
import { ACTUATOR_PATTERN, HOLDER_PATTERN, holderFromFlow } from "./names.mjs";
import { checkSetpoints } from "./setpoints.mjs";

/** Commands one command node may have waiting for their outcome; beyond it: refused OVERLOADED, not sent. */
const MAX_IN_FLIGHT = 32;
/** The contract's bounds on a deadline and this node set's on a TTL (the gateway applies its own within). */
const MAX_DEADLINE_MS = 600_000;
const MAX_TTL_MS = 3_600_000;

const STATUS = {
  held: (v) => ({ fill: "green", shape: "dot", text: `held, token ${v.token}` }),
  standby: (v) => ({ fill: "yellow", shape: "dot", text: `standing by: held by ${v.heldBy.holder}` }),
  lost: (v) => ({ fill: "red", shape: "dot", text: `lost: ${v.code}` }),
  waiting: (v) => ({ fill: "yellow", shape: "ring", text: `waiting: ${v.code === "TIMEOUT" ? "no gateway answers" : v.code}` }),
  released: () => ({ fill: "grey", shape: "ring", text: "not held" }),
};

/** A status text fits the editor's node label. */
const short = (text) => (text.length > 60 ? `${text.slice(0, 57)}…` : text);

/** An actuator's state that is not online: its device does not answer, or no gateway serves it now (stopped, gone, standing by). */
const offlineStatus = (s) => ({ fill: "red", shape: "ring", text: short(`offline: ${s.problem ?? "no gateway serves it now"}`) });

/**
 * Follows the actuator's retained state (and events) on the node's connection until the
 * node closes; returns the stop function for its close handler.
 */
function watchActuator(node, connection, actuator, onItem) {
  const watching = new AbortController();
  (async () => {
    const client = await connection.client();
    if (client === null) return;
    for await (const item of client.watch(actuator, { signal: watching.signal })) onItem(item);
  })().catch((err) => {
    if (!watching.signal.aborted) node.error(`fencegate: the watch of ${actuator} stopped: ${codeOf(err)} ${err.message}`);
  });
  return () => watching.abort();
}

/** A positive integer setting, or a sentence saying what is wrong with it. */
function integerSetting(value, name, most) {
  const n = Number(value);
  return Number.isInteger(n) && n >= 1 && n <= most
    ? n
    : `${name} must be a whole number of milliseconds from 1 to ${most}; it is "${value}".`;
}

export function registerFencegateNodes(RED) {
  /**
   * Checks what every fencegate node needs (a broker config node, a valid actuator id) and
   * takes a share of the connection for the node's holder; null (with a red status and an
   * error in the log) when something is missing.
   */
  function setUp(node, config) {
    const broker = RED.nodes.getNode(config.broker);
    const problem = !broker
      ? "no fencegate broker configured: pick or add one in the node's settings"
      : !ACTUATOR_PATTERN.test(config.actuator ?? "")
        ? `actuator "${config.actuator ?? ""}" is not an actuator id (a-z, 0-9, _ and -, at most 64)`
        : (broker.problem ?? null);
    if (problem) {
      node.status({ fill: "red", shape: "ring", text: short(problem) });
      node.error(`fencegate: ${problem}`);
      return null;
    }
    const holder = broker.holderFor(node);
    return { broker, holder, actuator: config.actuator, connection: broker.connections.use(holder) };
  }

  function FencegateBrokerNode(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    node.holder = (config.holder ?? "").trim();
    node.problem = null;
    const url = (config.url ?? "").trim();
    const tlsNode = config.usetls && config.tls ? RED.nodes.getNode(config.tls) : null;
    let scheme = "";
    try {
      scheme = new URL(url).protocol;
    } catch {
      node.problem = `broker URL "${url}" is not a URL such as mqtt://localhost:1883`;
    }
    if (!node.problem && !["mqtt:", "mqtts:", "ws:", "wss:"].includes(scheme))
      node.problem = `broker URL "${url}" must start with mqtt://, mqtts://, ws:// or wss://`;
    else if (!node.problem && tlsNode && !["mqtts:", "wss:"].includes(scheme))
      node.problem = `TLS is set, so the broker URL must start with mqtts:// or wss://, not ${scheme}//`;
    else if (node.holder !== "" && !HOLDER_PATTERN.test(node.holder))
      node.problem = `holder "${node.holder}" may have only A-Z, a-z, 0-9, . _ : - (at most 128)`;
    const tls = tlsNode ? tlsNode.addTLSOptions({}) : undefined;
    node.connections = new Connections(
      {
        url,
        baseTopic: (config.baseTopic ?? "").trim() || "fencegate",
        protocolVersion: config.protocolVersion === "4" ? 4 : 5,
        ...(node.credentials?.username ? { username: node.credentials.username } : {}),
        ...(node.credentials?.password ? { password: node.credentials.password } : {}),
        ...(tls
          ? {
              tls: {
                ca: tls.ca,
                cert: tls.cert,
                key: tls.key,
                passphrase: tls.passphrase,
                servername: tls.servername,
                rejectUnauthorized: tls.rejectUnauthorized,
              },
            }
          : {}),
      },
      RED.log,
    );
    /** The holder id `user` (a node) acts as: the configured one, or derived from the user's flow. */
    node.holderFor = (user) =>
      node.holder || holderFromFlow(hostname(), RED.util.getSetting(user, "NR_FLOW_NAME"), RED.util.getSetting(user, "NR_FLOW_ID"));
    node.on("close", (done) => {
      node.connections.closeAll().then(() => done(), done);
    });
  }
  RED.nodes.registerType("fencegate-broker", FencegateBrokerNode, {
    credentials: { username: { type: "text" }, password: { type: "password" } },
  });

  function FencegateLeaseNode(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const ttlMs = integerSetting(config.ttlMs, "TTL", MAX_TTL_MS);
    const setup =
      typeof ttlMs === "string"
        ? (node.status({ fill: "red", shape: "ring", text: "bad TTL" }), node.error(`fencegate: ${ttlMs}`), null)
        : setUp(node, config);
    if (!setup) return;
    const { broker, holder, actuator, connection } = setup;
    const keeper = new LeaseKeeper({
      connection,
      actuator,
      ttlMs,
      onChange: (view) => {
        node.status(STATUS[view.state](view));
        node.send({ topic: actuator, payload: view });
      },
    });
    if (!broker.connections.claimLease(holder, actuator, keeper)) {
      node.status({ fill: "red", shape: "ring", text: "another lease node has this actuator" });
      node.error(
        `fencegate: another fencegate lease node already keeps ${actuator} for holder ${holder} on this broker; one lease node per actuator and holder (command nodes share it).`,
      );
      void keeper.close(false);
      void connection.release();
      return;
    }
    connection.onProblem((problem) => {
      if (problem !== null && keeper.held() === null) node.status({ fill: "yellow", shape: "ring", text: short(problem) });
      else if (problem === null && keeper.view) node.status(STATUS[keeper.view.state](keeper.view));
    });
    node.status({ fill: "grey", shape: "ring", text: config.acquireOnStart === false ? "not held" : "acquiring" });
    keeper.start(config.acquireOnStart !== false);
    node.on("input", (msg, send, done) => {
      if (msg.payload === "acquire") keeper.want();
      else if (msg.payload === "release") void keeper.unwant();
      // Said as a sentence without a stack: catch nodes get it with the message.
      else
        node.error(
          `fencegate lease: msg.payload must be "acquire" or "release"; it is ${JSON.stringify(msg.payload) ?? String(msg.payload)}.`,
          msg,
        );
      done();
    });
    node.on("close", (removed, done) => {
      broker.connections.unclaimLease(holder, actuator, keeper);
      keeper
        .close(removed)
        .then(() => connection.release())
        .then(() => done(), done);
    });
  }
  RED.nodes.registerType("fencegate-lease", FencegateLeaseNode);

  function FencegateCommandNode(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const deadlineMs =
      String(config.deadlineMs ?? "").trim() === "" ? undefined : integerSetting(config.deadlineMs, "Deadline", MAX_DEADLINE_MS);
    const setup =
      typeof deadlineMs === "string"
        ? (node.status({ fill: "red", shape: "ring", text: "bad deadline" }), node.error(`fencegate: ${deadlineMs}`), null)
        : setUp(node, config);
    if (!setup) return;
    const { broker, holder, actuator, connection } = setup;
    let inFlight = 0;
    // The status shows the last outcome, unless something now says more: the broker is lost,
    // or the actuator is offline (a green "applied" would stand while its gateway is gone).
    let outcome = null;
    let offline = null;
    let trouble = null;
    const showStatus = () => {
      const status = trouble !== null ? { fill: "yellow", shape: "ring", text: short(trouble) } : (offline ?? outcome);
      if (status !== null) node.status(status);
    };
    const showOutcome = (status) => {
      outcome = status;
      showStatus();
    };
    connection.onProblem((problem) => {
      trouble = problem;
      showStatus();
    });
    const stopWatching = watchActuator(node, connection, actuator, (item) => {
      if (item.kind !== "state") return;
      const before = offline;
      offline = item.state.online ? null : offlineStatus(item.state);
      if (offline?.text !== before?.text) showStatus();
    });

    function refuse(msg, send, done, refusal) {
      const unknown = refusal.code === "OUTCOME_UNKNOWN" || refusal.code === "TIMEOUT";
      showOutcome(
        unknown
          ? { fill: "yellow", shape: "ring", text: `outcome unknown (${refusal.code}): state re-read` }
          : {
              fill: "red",
              shape: "ring",
              text: refusal.code === "NO_LEASE" ? "refused: no lease held, nothing sent" : `refused: ${refusal.code}`,
            },
      );
      msg.payload = { outcome: unknown ? "unknown" : "refused", actuator, holder, ...refusal };
      send([null, msg]);
      done();
    }

    node.on("input", async (msg, send, done) => {
      const set = msg.payload;
      const checked = checkSetpoints(set);
      if (!checked.ok) return refuse(msg, send, done, { code: "INVALID_REQUEST", message: checked.message, sent: false, set });
      const keeper = broker.connections.leaseKeeper(holder, actuator);
      const lease = keeper?.held() ?? null;
      if (lease === null) {
        const message = keeper
          ? keeper.whyNotHeld()
          : `No fencegate lease node keeps ${actuator} for holder ${holder}: add one with the same broker and actuator. Nothing was sent.`;
        return refuse(msg, send, done, { code: "NO_LEASE", message, sent: false, set });
      }
      if (inFlight >= MAX_IN_FLIGHT)
        return refuse(msg, send, done, {
          code: "OVERLOADED",
          message: `${MAX_IN_FLIGHT} commands of this node are still waiting for their outcome. Nothing was sent.`,
          sent: false,
          set,
        });
      inFlight++;
      try {
        const result = await lease.command(checked.set, deadlineMs !== undefined ? { deadlineMs } : {});
        showOutcome({ fill: "green", shape: "dot", text: `applied, token ${result.token} seq ${result.seq}` });
        msg.payload = { outcome: "applied", actuator, holder, token: result.token, seq: result.seq, applied: result.applied };
        send([msg, null]);
        done();
      } catch (err) {
        if (err instanceof LeaseLostError)
          return refuse(msg, send, done, { code: "NO_LEASE", message: `${err.message} Nothing was sent.`, sent: false, set });
        if (err instanceof FencegateError) {
          const details = { fence: err.fence, lease: err.lease, modbusCode: err.modbusCode, state: err.state };
          const said = err.message.replace(/^[A-Z_]+: /, "");
          const message =
            err.code === "OUTCOME_UNKNOWN"
              ? `${said} The device may have applied it; the state was re-read${err.state ? "" : " but could not be had"}.`
              : said;
          return refuse(msg, send, done, {
            code: err.code,
            message,
            sent: true,
            set,
            ...Object.fromEntries(Object.entries(details).filter(([, v]) => v !== undefined)),
          });
        }
        if (err instanceof FencegateTimeoutError) {
          // No reply after the retries: it may have been applied. Read what the device says now.
          const client = await connection.client();
          const state = await client?.read(actuator).catch(() => undefined);
          return refuse(msg, send, done, {
            code: "TIMEOUT",
            message: `${err.message}. The device may have applied it; the state was re-read${state ? "" : " but could not be had"}.`,
            sent: true,
            set,
            ...(state ? { state } : {}),
          });
        }
        done(err);
      } finally {
        inFlight--;
      }
    });
    node.on("close", (done) => {
      stopWatching();
      connection.release().then(() => done(), done);
    });
  }
  RED.nodes.registerType("fencegate-command", FencegateCommandNode);

  function FencegateStateNode(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const setup = setUp(node, config);
    if (!setup) return;
    const { actuator, connection } = setup;
    node.status({ fill: "grey", shape: "ring", text: "connecting" });
    connection.onProblem((problem) => {
      if (problem !== null) node.status({ fill: "yellow", shape: "ring", text: short(problem) });
    });
    const stopWatching = watchActuator(node, connection, actuator, (item) => {
      if (item.kind === "state") {
        const s = item.state;
        node.status(
          !s.online
            ? offlineStatus(s)
            : s.lease
              ? { fill: "green", shape: "dot", text: `online, held by ${s.lease.holder} (token ${s.lease.token})` }
              : { fill: "green", shape: "ring", text: "online, no lease" },
        );
        node.send([{ topic: actuator, payload: s }, null]);
      } else {
        node.send([null, { topic: actuator, payload: item.event }]);
      }
    });
    node.on("close", (done) => {
      stopWatching();
      connection.release().then(() => done(), done);
    });
  }
  RED.nodes.registerType("fencegate-state", FencegateStateNode);
}
