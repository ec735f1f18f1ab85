// The recall tool: the OpenAI tool definition an agent passes in `tools` (the same as
// schemas/recall-tool.json, which a test compares), and the reading of its arguments.

import { InvalidError } from "./errors.js";

/** The function name of the recall tool. */
export const RECALL_TOOL_NAME = "recall";

/** The largest recall budget, and the longest query in UTF-8 bytes. */
export const MAX_RECALL_MAX_TOKENS = 1_000_000;

/** The budget of a recall that names none, or 0 (Go: schemas.DefaultRecallMaxTokens). */
export const DEFAULT_RECALL_MAX_TOKENS = 4000;

/** The cap answerRecall puts on a model's max_tokens unless given another (Go: schemas.DefaultAnswerRecallMaxTokens). */
export const ANSWER_RECALL_MAX_TOKENS = 8000;
export const MAX_RECALL_QUERY_BYTES = 1024;
/** The longest arguments of a recall tool call, in UTF-8 bytes (as the Go reader counts them). */
export const MAX_RECALL_ARGUMENTS_BYTES = 8192;

/** The recall tool's definition, for the tools of a chat completion request. */
export const RECALL_TOOL = {
  type: "function",
  function: {
    name: RECALL_TOOL_NAME,
    description:
      "Recall raw messages of this conversation that were summarized away or that you need verbatim: exact file contents, command output, error text, ids, numbers. The summary message says which sequence range it covers. Search by text (case-insensitive substring) and/or by sequence range. Returns JSON: messages (each with its sequence number seq), newest first, a tool call always together with its results, within max_tokens; cut_by_budget and skipped_seqs say what did not fit (recall that range again with a larger max_tokens); scan_complete false means older messages were not searched (ask again with to_seq below scanned_from_seq).",
    parameters: {
      type: "object",
      properties: {
        query: {
          type: "string",
          description: "Text to find, ignoring case: a file name, a command, an error message, an id. Leave out to get every message of the range.",
        },
        from_seq: {
          type: "integer",
          minimum: 0,
          description: "First sequence number to search (inclusive). Leave out to start at the beginning.",
        },
        to_seq: {
          type: "integer",
          minimum: 0,
          description: "Last sequence number to search (inclusive). Leave out to end at the newest message.",
        },
        max_tokens: {
          type: "integer",
          minimum: 0,
          maximum: 1000000,
          description:
            "Budget of the answer in tokens; 0 or left out: 4000. A budget over the application's cap (8000 unless it set another) is lowered to the cap, and asked_max_tokens then says what you asked.",
        },
      },
      additionalProperties: false,
    },
  },
} as const;

/** What to recall: the options of Compactor.recall. */
export interface RecallOptions {
  /** Only messages that hold this text, ignoring case (content, names, tool calls and results). */
  query?: string;
  /** Search from this CHAT sequence on (inclusive). */
  fromSeq?: number;
  /** Search up to this CHAT sequence (inclusive). */
  toSeq?: number;
  /** Budget of the returned messages (default 4000 tokens). */
  maxTokens?: number;
}

/** Checks recall options by the rules of compactor.recall; an InvalidError names the field. */
export function checkRecallOptions(o: RecallOptions): void {
  const query = o.query ?? "";
  if (typeof query !== "string") throw new InvalidError("query", "must be a string");
  const n = Buffer.byteLength(query);
  if (n > MAX_RECALL_QUERY_BYTES) throw new InvalidError("query", `is ${n} bytes long; at most ${MAX_RECALL_QUERY_BYTES} are allowed`);
  for (const [field, v] of [["from_seq", o.fromSeq], ["to_seq", o.toSeq]] as const) {
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 0)) throw new InvalidError(field, "must be a non-negative integer");
  }
  if (o.toSeq && o.fromSeq && o.fromSeq > o.toSeq) {
    throw new InvalidError("from_seq", `must not be after to_seq (${o.fromSeq} > ${o.toSeq})`);
  }
  const mt = o.maxTokens;
  if (mt !== undefined && (!Number.isSafeInteger(mt) || mt < 0 || mt > MAX_RECALL_MAX_TOKENS)) {
    throw new InvalidError("max_tokens", `must be between 0 (the default, 4000) and ${MAX_RECALL_MAX_TOKENS}`);
  }
}

/**
 * Reads the arguments of a model's recall tool call (a JSON object as text; "" is {})
 * into recall options; an InvalidError names what is wrong, for the model to correct.
 */
export function decodeRecallArguments(args: string): RecallOptions {
  const n = Buffer.byteLength(args);
  if (n > MAX_RECALL_ARGUMENTS_BYTES) {
    throw new InvalidError("arguments", `are ${n} bytes long; at most ${MAX_RECALL_ARGUMENTS_BYTES} are allowed`);
  }
  let v: unknown;
  try {
    v = args.trim() === "" ? {} : JSON.parse(args);
  } catch (e) {
    throw new InvalidError("arguments", `must be a JSON object of query, from_seq, to_seq and max_tokens (${(e as Error).message})`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new InvalidError("arguments", "must be a JSON object of query, from_seq, to_seq and max_tokens");
  }
  const a = v as Record<string, unknown>;
  for (const k of Object.keys(a)) {
    if (!["query", "from_seq", "to_seq", "max_tokens"].includes(k)) {
      throw new InvalidError("arguments", `must be a JSON object of query, from_seq, to_seq and max_tokens (unknown field ${JSON.stringify(k)})`);
    }
  }
  const num = (k: string): number | undefined => {
    const x = a[k];
    if (x === undefined || x === null) return undefined;
    if (typeof x !== "number") throw new InvalidError(k, "must be a non-negative integer");
    return x;
  };
  if (a["query"] !== undefined && a["query"] !== null && typeof a["query"] !== "string") throw new InvalidError("query", "must be a string");
  const o: RecallOptions = {
    query: (a["query"] as string | undefined) ?? undefined,
    fromSeq: num("from_seq"),
    toSeq: num("to_seq"),
    maxTokens: num("max_tokens"),
  };
  checkRecallOptions(o);
  return o;
}
