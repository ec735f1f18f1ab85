// @compactor/client: the TypeScript client of Compactor (README, "TypeScript client").

export { Compactor, connectOptionsFromEnv } from "./client.js";
export type {
  CompactOptions,
  CompactorOptions,
  ConnectOptions,
  ContextOptions,
  PolicyApi,
  BatchMessage,
  PublishAllOptions,
  PublishBatchOptions,
  PublishOptions,
  PublishResult,
} from "./client.js";
export * from "./errors.js";
export {
  RECALL_TOOL,
  RECALL_TOOL_NAME,
  MAX_RECALL_MAX_TOKENS,
  MAX_RECALL_QUERY_BYTES,
  ANSWER_RECALL_MAX_TOKENS,
  DEFAULT_RECALL_MAX_TOKENS,
  MAX_RECALL_ARGUMENTS_BYTES,
  checkRecallOptions,
  decodeRecallArguments,
  type RecallOptions,
} from "./tool.js";
export type * from "./types.js";
export { DEFAULT_NAMES, type Names } from "./store.js";
export { assemble, applyOverride, truncate, summaryText, SUMMARY_PREFIX, type AssembleInput, type AssembleOptions } from "./assemble.js";
export { normalize, checkPairs, type Entry } from "./rounds.js";
export { decodeMessage, validateConversationId, stripMetadata, contentText } from "./message.js";
export { decodeValue, type ValueView } from "./value.js";
export { chars4, messageTokens, estimateTokens, floorTokens, FLOOR_BYTES_PER_TOKEN, type Counter } from "./tokens.js";
export { restore, offload, ObjectGap, OBJECTS_BUCKET, MAX_OBJECT_SIZE } from "./objects.js";
export { liveValue, readContext, resolveEntries, type ContextSource, type ReadOptions, type Tombstone } from "./reader.js";
export { toEntry, missingPinned } from "./store.js";
export { checkOwner, checkInfo, checkBytes, objectMetaSubject, type ObjectInfo } from "./objects.js";
