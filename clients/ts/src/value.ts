// The KV value of a conversation, decoded with the rules of the Go reader
// (schemas.DecodeResult and jetstream's decodeResultOf): a value Go refuses is refused.

import { InvalidError, NewerSchemaError } from "./errors.js";
import { describe, forEachField, intFromText, isNullText, kindOf, memberMap, rawElements, stringFromText } from "./json.js";
import { validateConversationId } from "./message.js";
import type { CompactionValue, Override } from "./types.js";

/** What the reader algorithm uses of a value. */
export interface ValueView {
  value: CompactionValue;
  generation: number;
  summary: string;
  /** The rendered evidence section; "" when the value has none. */
  evidenceText: string;
  summaryRole: string;
  tailStartSeq: number;
  coveredThroughSeq: number;
  pinnedSeqs: number[];
  overrides: Override[];
  /** The lowest CHAT sequence the value depends on (0: unknown); a forget through it covers the value. */
  firstSeq: number;
}

type Kind = "int" | "uint" | "string" | "bool" | "uints" | "overrides" | "usage" | "time" | "evidence";

const FIELDS: Record<string, Kind> = {
  schema_version: "int",
  conversation: "string",
  generation: "uint",
  summary: "string",
  evidence_text: "string",
  evidence: "evidence",
  summary_role: "string",
  tail_start_seq: "uint",
  covered_through_seq: "uint",
  pinned_seqs: "uints",
  kept_seqs: "uints",
  overrides: "overrides",
  strategy: "string",
  trigger: "string",
  reason: "string",
  request_id: "string",
  request_seq: "uint",
  llm_base_generation: "uint",
  fallback: "bool",
  model: "string",
  prompt_hash: "string",
  tokens_before: "int",
  tokens_after: "int",
  messages_before: "int",
  messages_after: "int",
  usage: "usage",
  declined_at_seq: "uint",
  loaded_through_seq: "uint",
  first_seq: "uint",
  built_on_fallback: "bool",
  repair_of: "uint",
  repair_gap: "bool",
  created_at: "time",
};

const decodeError = (why: string) => new InvalidError("value", `does not decode: ${why}`);

/**
 * Decodes the value stored under conv's key. A newer schema_version is a
 * NewerSchemaError; a value that breaks the contract (or names another conversation)
 * an InvalidError.
 */
export function decodeValue(text: string, conv: string): ValueView {
  try {
    return decodeChecked(text, conv);
  } catch (e) {
    if (e instanceof InvalidError) {
      throw new InvalidError(e.field, `${e.rule} (compaction value of ${conv})`);
    }
    throw e;
  }
}

function decodeChecked(text: string, conv: string): ValueView {
  let top: unknown;
  try {
    top = JSON.parse(text);
  } catch (e) {
    throw decodeError((e as Error).message);
  }
  if (top !== null && (typeof top !== "object" || Array.isArray(top))) throw decodeError("not a JSON object");
  const all = top === null ? new Map<string, string>() : memberMap(text);
  let version = 0;
  const sv = all.get("schema_version");
  if (sv !== undefined && !isNullText(sv)) {
    try {
      version = intFromText(sv, false);
    } catch (e) {
      throw new InvalidError("schema_version", `must be an integer: ${(e as Error).message}`);
    }
  }
  if (version > 1) throw new NewerSchemaError(version);
  if (version < 1) throw new InvalidError("schema_version", `must be at least 1, got ${version}`);
  const f: Record<string, unknown> = {};
  for (const [k, raw] of all) {
    const kind = FIELDS[k];
    if (kind === undefined) continue;
    try {
      const v = decodeKind(kind, raw);
      if (v !== undefined) f[k] = v;
    } catch (e) {
      throw decodeError(`${k}: ${(e as Error).message}`);
    }
  }
  const view: ValueView = {
    value: top as CompactionValue,
    generation: (f["generation"] as number) ?? 0,
    summary: (f["summary"] as string) ?? "",
    evidenceText: (f["evidence_text"] as string) ?? "",
    summaryRole: (f["summary_role"] as string) ?? "",
    tailStartSeq: (f["tail_start_seq"] as number) ?? 0,
    coveredThroughSeq: (f["covered_through_seq"] as number) ?? 0,
    pinnedSeqs: (f["pinned_seqs"] as number[]) ?? [],
    overrides: (f["overrides"] as Override[]) ?? [],
    firstSeq: (f["first_seq"] as number) ?? 0,
  };
  const id = (f["conversation"] as string) ?? "";
  try {
    validateConversationId(id);
  } catch (e) {
    throw new InvalidError("conversation", (e as Error).message);
  }
  if (view.tailStartSeq < 1) throw new InvalidError("tail_start_seq", `must be at least 1, got ${view.tailStartSeq}`);
  if (view.coveredThroughSeq >= view.tailStartSeq) {
    throw new InvalidError(
      "covered_through_seq",
      `must be below tail_start_seq ${view.tailStartSeq}, got ${view.coveredThroughSeq}`,
    );
  }
  if (view.pinnedSeqs.includes(0)) throw new InvalidError("pinned_seqs", "sequences start at 1");
  if (id !== conv) throw new InvalidError("conversation", `is ${JSON.stringify(id)}, not the key's`);
  return view;
}

function decodeKind(kind: Kind, raw: string): unknown {
  if (isNullText(raw)) return undefined;
  switch (kind) {
    case "int":
      return intFromText(raw, false);
    case "uint":
      return intFromText(raw, true);
    case "string":
      return stringFromText(raw, "");
    case "bool":
      if (kindOf(raw) !== "t" && kindOf(raw) !== "f") throw new Error(`${describe(raw)} is not a boolean`);
      return JSON.parse(raw) as boolean;
    case "uints":
      if (kindOf(raw) !== "[") throw new Error(`${describe(raw)} is not an array`);
      return rawElements(raw).map((e) => (isNullText(e) ? 0 : intFromText(e, true)));
    case "overrides":
      if (kindOf(raw) !== "[") throw new Error(`${describe(raw)} is not an array`);
      return rawElements(raw).map(decodeOverride);
    case "usage":
      if (kindOf(raw) !== "{") throw new Error(`${describe(raw)} is not an object`);
      forEachField(raw, ["prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"], (_, v) => {
        if (!isNullText(v)) intFromText(v, false);
      });
      return JSON.parse(raw);
    case "evidence":
      // Checked as Go decodes it (schemas.Evidence); readers use only evidence_text.
      if (kindOf(raw) !== "{") throw new Error(`${describe(raw)} is not an object`);
      forEachField(raw, ["through_seq", "items"], (f, v) => {
        if (isNullText(v)) return;
        if (f === "through_seq") {
          intFromText(v, true);
          return;
        }
        if (kindOf(v) !== "[") throw new Error(`evidence items: ${describe(v)} is not an array`);
        rawElements(v).forEach(decodeEvidenceItem);
      });
      return JSON.parse(raw);
    case "time":
      if (kindOf(raw) !== '"' || !rfc3339(JSON.parse(raw) as string)) throw new Error(`${raw.slice(0, 40)} is not an RFC 3339 time`);
      return JSON.parse(raw);
  }
}

function decodeEvidenceItem(raw: string): void {
  if (isNullText(raw)) return;
  if (kindOf(raw) !== "{") throw new Error(`evidence item: ${describe(raw)} is not an object`);
  forEachField(raw, ["kind", "value", "count", "last_seq", "changed"], (f, v) => {
    if (isNullText(v)) return;
    if (f === "kind" || f === "value") stringFromText(v, "");
    else if (f === "changed") {
      if (kindOf(v) !== "t" && kindOf(v) !== "f") throw new Error(`evidence item: ${describe(v)} is not a boolean`);
    } else intFromText(v, f === "last_seq");
  });
}

function decodeOverride(raw: string): Override {
  const o: Override = { seq: 0, keep_head: 0, keep_tail: 0 };
  if (isNullText(raw)) return o;
  if (kindOf(raw) !== "{") throw new Error(`${describe(raw)} is not an object`);
  forEachField(raw, ["seq", "keep_head", "keep_tail", "note"], (f, v) => {
    if (f === "note") o.note = stringFromText(v, o.note ?? "");
    else if (!isNullText(v)) (o as unknown as Record<string, number>)[f] = intFromText(v, f === "seq");
  });
  return o;
}

/**
 * Whether s is a time as Go's time.Time reads one from JSON: time.Parse with the RFC 3339
 * layout, which is laxer than RFC 3339 (Go's strict check is disabled): an hour of one
 * digit, a comma before the fraction, a zone offset up to 24:60.
 */
function rfc3339(s: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})([.,]\d+)?(Z|[+-](\d{2}):(\d{2}))$/.exec(s);
  if (!m) return false;
  const [y, mo, d, h, mi, se] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [number, number, number, number, number, number];
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  const days = mo === 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].includes(mo) ? 30 : 31;
  if (mo < 1 || mo > 12 || d < 1 || d > days || h > 23 || mi > 59 || se > 59) return false;
  return m[8] === "Z" || (Number(m[9]) <= 24 && Number(m[10]) <= 60);
}
