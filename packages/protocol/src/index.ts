/**
 * The wire contract's one home (docs/mqtt-api.md, docs/architecture.md): what the gateway,
 * the client library and the Node-RED nodes must agree on, with no I/O and no runtime
 * dependency. Each side imports it from here; none keeps a copy.
 */
export { ERROR_CODES, type ErrorCode } from "./codes.ts";
export {
  ACTUATOR_PATTERN,
  CONFIGURED_POINT_NAME_PATTERN,
  HOLDER_PATTERN,
  POINT_NAME_PATTERN,
  REQUEST_ID_PATTERN,
  isPointName,
} from "./names.ts";
export { canonicalForm, sign, verify, type SignedFields } from "./signature.ts";
export type { PointValues } from "./values.ts";
export {
  GATEWAY_LEVEL,
  MAX_RESPONSE_TOPIC_BYTES,
  MAX_RESPONSE_TOPIC_LEVELS,
  REQUEST_VERBS,
  actuatorRequestSubscriptions,
  clientReplyTopic,
  eventsTopic,
  gatewayActuatorsTopic,
  gatewayStatusTopic,
  isActuatorId,
  isHolderId,
  parseRequestTopic,
  replyTopic,
  requestSubscriptions,
  requestTopic,
  responseTopicProblem,
  stateTopic,
  topicMatches,
  type RequestTopic,
  type RequestVerb,
} from "./topics.ts";
export {
  GATEWAY_STATUSES,
  withGatewayStatus,
  type ContractState,
  type ErrorBody,
  type EventBody,
  type EventMessage,
  type EventType,
  type Fence,
  type GatewayIdentity,
  type GatewayRole,
  type GatewayStatus,
  type LeaseView,
  type Reply,
  type GatewayRequest,
  type StateExtensions,
  type StateMessage,
} from "./messages.ts";
