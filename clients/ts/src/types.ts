// The wire types of contract v1 (schemas/*.v1.json), as this client hands them out.

/** The author of a chat message. */
export type Role = "system" | "user" | "assistant" | "tool";

/** One element of an array content, kept as the producer sent it. */
export type ContentPart =
  | { type: "text"; text: string; [k: string]: unknown }
  | { type: "image_url"; image_url: unknown; [k: string]: unknown }
  | { type: "input_audio"; input_audio: unknown; [k: string]: unknown }
  | { type: "file"; file: unknown; [k: string]: unknown }
  | { type: "refusal"; refusal: unknown; [k: string]: unknown }
  | { type: string; [k: string]: unknown };

/** A message's content: a string, an array of content parts, or null beside tool calls. */
export type Content = string | ContentPart[] | null;

/** One function call an assistant message asks for. */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** The token usage an LLM reported for one call. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens?: number;
  /** The part of prompt_tokens the endpoint served from its prompt cache, where it reports them. */
  cached_tokens?: number;
}

/** Where the content of a message over the max payload is stored (a stub's reference). */
export interface ContentRef {
  bucket: string;
  /** <conversation>/<sha256 of the object> */
  name: string;
  size: number;
  sha256: string;
  /** chars/4 estimate of what the object holds */
  tokens: number;
}

/**
 * One chat message in OpenAI chat format, as published on chat.<conv>.msg. Fields this
 * version does not know are kept and returned.
 */
export interface Message {
  role: Role;
  content?: Content;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  reasoning?: string;
  /** Any JSON object the producer wants back untouched. */
  extra?: Record<string, unknown>;
  // Compactor's metadata, stripped from a context unless format "raw" is asked for.
  /** The producer's token count: a hint, never counted below a token per 8 UTF-8 bytes of the text (floorTokens). */
  tokens?: number;
  /** What the model reported for the call; prompt_tokens counts the whole context, cached tokens included. */
  usage?: Usage;
  context_generation?: number;
  /** meta.pin = "true" pins a message verbatim forever. */
  meta?: Record<string, string>;
  /** Set by this client on a stub; never hand one in. */
  content_ref?: ContentRef;
  [unknown: string]: unknown;
}

/** A per-sequence truncation every reader applies. */
export interface Override {
  seq: number;
  keep_head: number;
  keep_tail: number;
  note?: string;
}

/** Evidence extracted deterministically from the messages a summary covers. */
export interface Evidence {
  through_seq: number;
  items: EvidenceItem[];
}

/** One distinct piece of evidence: a file, command, url, id or number. */
export interface EvidenceItem {
  kind: "file" | "command" | "url" | "id" | "number";
  value: string;
  count: number;
  last_seq: number;
  changed?: boolean;
}

/** The KV value of key <conv> in bucket "compaction": a summary and where the tail starts. */
export interface CompactionValue {
  schema_version: number;
  conversation: string;
  generation: number;
  summary: string;
  /** The rendered evidence section, appended to the summary message after a blank line. */
  evidence_text?: string;
  /** What compactions extracted from the messages they covered (readers need not know it). */
  evidence?: Evidence;
  summary_role?: string;
  tail_start_seq: number;
  covered_through_seq: number;
  pinned_seqs?: number[];
  kept_seqs?: number[];
  overrides?: Override[];
  strategy?: string;
  trigger?: string;
  reason?: string;
  request_id?: string;
  request_seq?: number;
  llm_base_generation: number;
  fallback: boolean;
  model?: string;
  prompt_hash?: string;
  tokens_before: number;
  tokens_after: number;
  messages_before: number;
  messages_after: number;
  usage?: Usage;
  declined_at_seq?: number;
  loaded_through_seq?: number;
  first_seq?: number;
  /** The summary is, or was built on, a fallback written while the LLM failed; a repair replaces it. */
  built_on_fallback?: boolean;
  /** Set on a repair: the generation of the fallback value it replaced. */
  repair_of?: number;
  /** The fallback cannot be repaired: messages it covers left the stream. */
  repair_gap?: boolean;
  created_at: string;
  /** Fields of a newer writer, kept. */
  [unknown: string]: unknown;
}

/** A message a read left out, and why. */
export interface Skipped {
  seq: number;
  reason: string;
}

/** What a model should be sent for a conversation. */
export interface Context {
  messages: Message[];
  /** The CHAT sequence of each message; 0 for the summary. */
  seqs: number[];
  generation: number;
  tailStartSeq: number;
  hasSummary: boolean;
  /** The estimate of messages (producer counts win where given). */
  tokens: number;
  /** Cut at read time to fit maxTokens. */
  degraded: boolean;
  skipped: Skipped[];
}

/** The statuses of a compactor.compact answer. */
export type CompactStatus = "queued" | "busy" | "completed" | "declined" | "failed";

/** The answer of compactor.compact (service-compact-response.v1.json). */
export interface CompactResponse {
  status: CompactStatus;
  request_id?: string;
  /** The conversation's value after a completed request. */
  result?: CompactionValue | null;
  error?: string;
}

/** The answer of compactor.context (service-context-response.v1.json). */
export interface ContextResponse {
  conversation: string;
  value: CompactionValue | null;
  tail_start_seq: number;
  last_seq: number;
  /** The request's format, when it named one (openai, anthropic, responses, gemini). */
  format?: string;
  /** With a format: the assembled context as that API's request fragment. */
  rendered?: Record<string, unknown>;
}

/** The answer of compactor.status for one conversation (service-status-response.v1.json). */
export interface ConversationStatus {
  conversation: string;
  value: CompactionValue | null;
  last_seq: number;
  pending: boolean;
  pending_request_id?: string;
}

/** The answer of compactor.policy (service-policy-response.v1.json). */
export interface PolicyResponse {
  conversation: string;
  /** The conversation's own policy: key → value as text. */
  policy: Record<string, string> | null;
  /** The settings it resolves to, by key, plus "profile". */
  settings: Record<string, unknown>;
}

/** The answer of compactor.forget (service-forget-response.v1.json). */
export interface ForgetResponse {
  conversation: string;
  through_seq: number;
  forgotten_at: string;
  deleted: {
    chat_messages: number;
    chat_messages_erased: number;
    result_revisions: number;
    policy_revisions: number;
    requests: number;
    events: number;
    dead_letters: number;
    /** The savings ledger's entries of the conversation; absent from earlier versions' answers. */
    ledger_entries?: number;
    activity_markers: number;
    objects: number;
  };
}

/** The event types on compact.event.<conv>. */
export type EventType = "requested" | "started" | "completed" | "declined" | "failed" | "forgotten";

/** One step of a compaction request (event.v1.json). */
export interface CompactionEvent {
  type: EventType;
  conversation: string;
  request_id: string;
  generation: number;
  trigger?: string;
  reason?: string;
  tokens_before: number;
  tokens_after: number;
  duration_ms: number;
  error?: string;
  at: string;
}

/** A raw message of a recall: the message with its CHAT sequence. */
export type RecalledMessage = Message & { seq: number };

/** The answer of compactor.recall (service-recall-response.v1.json). */
export interface RecallResponse {
  conversation: string;
  /** Tool rounds (a call with all its results, in stream order) and single messages, newest first. */
  messages: RecalledMessage[];
  /** Messages in the scanned range that matched (a round counts all its messages). */
  matched: number;
  returned: number;
  tokens: number;
  max_tokens: number;
  /** What a model's recall tool call asked for when answerRecall capped it (max_tokens is the cap applied). */
  asked_max_tokens?: number;
  /** Matching messages were left out to fit max_tokens. */
  cut_by_budget: boolean;
  /** The first sequence of each unit left out (budget, then payload), at most 32. */
  skipped_seqs?: number[];
  /** Matching units were left out to stay under the NATS max payload (named in skipped_seqs). */
  cut_by_payload?: boolean;
  scanned_from_seq: number;
  scanned_to_seq: number;
  /** False when the scan stopped at its bound: ask again with toSeq below scanned_from_seq. */
  scan_complete: boolean;
  /** Messages left out because their tool round is not whole in the range. */
  incomplete?: number;
  invalid?: number;
}
