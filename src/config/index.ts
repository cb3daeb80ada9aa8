/** The daemon's configuration: one YAML file, validated with every problem reported at once. */
export { actuatorCoreConfig, coreLimits, findActuator } from "./core.ts";
export { loadConfigFile, loadConfigText } from "./load.ts";
export { parseConfig, validate, type ParseOptions, type Validation } from "./parse.ts";
export { ConfigError, formatPath, type ConfigProblem } from "./problems.ts";
export {
  gatewayConfigSchema,
  ID_PATTERN,
  isLoopbackHost,
  POINT_NAME_PATTERN,
  registerCount,
  representableRange,
  type ActuatorEntry,
  type BusConfig,
  type ExpiryConfig,
  type GatewayConfig,
  type MqttConfig,
  type PointConfig,
  type PointType,
  type RtuBusConfig,
  type TcpBusConfig,
} from "./schema.ts";
