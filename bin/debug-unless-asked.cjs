// The `debug` package as the bundle's dependencies see it (bin/build.mjs): the real one when
// DEBUG is set at start, else loggers that do nothing. mqtt-packet calls its loggers several
// times for every packet it parses or writes, and the real ones, disabled, still gather
// their arguments: 7 % of the daemon's allocations at 16 busy actuators.
"use strict";

function silent(namespace) {
  const log = function () {};
  log.namespace = namespace;
  log.enabled = false;
  log.useColors = false;
  log.color = 0;
  log.diff = 0;
  log.log = log;
  log.extend = (sub, delimiter = ":") => silent(`${namespace}${delimiter}${sub}`);
  log.destroy = () => false;
  return log;
}
silent.enable = () => {};
silent.disable = () => "";
silent.enabled = () => false;
silent.names = [];
silent.skips = [];
silent.formatters = {};
silent.humanize = (ms) => `${ms}ms`;
silent.coerce = (value) => value;
silent.debug = silent;
silent.default = silent;

module.exports = process.env.DEBUG ? require("debug") : silent;
