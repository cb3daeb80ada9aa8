"use strict";
// Node-RED loads a node set with require(). fencegate-client is an ES module, and so are
// these nodes: Node-RED waits for the promise returned here before it starts any flow.
module.exports = async function (RED) {
  const { registerFencegateNodes } = await import("./lib/register.mjs");
  registerFencegateNodes(RED);
};
