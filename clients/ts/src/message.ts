// Decoding and validating chat messages with the rules of the Go client
// (schemas.DecodeMessage, Message.Validate): a message Go skips is skipped here, with
// the same field named, and a message both accept comes out as the same JSON value.

import { InvalidError } from "./errors.js";
import {
  badUTF8,
  forEachField,
  intFromText,
  isNullText,
  isObject,
  kindOf,
  memberMap,
  describe,
  rawElements,
  setOwn,
  stringFromText,
  utf8Bytes,
  utf8Text,
} from "./json.js";
import type { ContentPart, ContentRef, Message, ToolCall, Usage } from "./types.js";

const ROLES = new Set(["system", "user", "assistant", "tool"]);

/** The top-level fields of the wire contract, in the order they are written. */
export const MESSAGE_FIELDS = [
  "role",
  "content",
  "name",
  "tool_calls",
  "tool_call_id",
  "reasoning",
  "extra",
  "tokens",
  "usage",
  "context_generation",
  "meta",
  "content_ref",
] as const;
const KNOWN = new Set<string>(MESSAGE_FIELDS);

const FIELD_WANT: Record<string, string> = {
  role: "must be a string",
  name: "must be a string",
  tool_calls: "must be an array of {id, type, function: {name, arguments}}",
  tool_call_id: "must be a string",
  reasoning: "must be a string",
  tokens: "must be an integer",
  usage: "must be an object {prompt_tokens, completion_tokens}",
  context_generation: "must be a non-negative integer",
  meta: "must be an object of string values",
  content_ref: "must be an object {bucket, name, size, sha256, tokens}",
};

/** The conversation id rule: 1-128 characters of [A-Za-z0-9_-], never rewritten. */
export function validateConversationId(id: unknown): asserts id is string {
  if (typeof id !== "string" || id === "") {
    throw new InvalidError("conversation", "must not be empty (1-128 characters of [A-Za-z0-9_-])");
  }
  let pos = 0;
  for (const ch of id) {
    if (!/^[A-Za-z0-9_-]$/.test(ch)) {
      throw new InvalidError(
        "conversation",
        `character ${JSON.stringify(ch)} at position ${pos} is not allowed; use only [A-Za-z0-9_-] (1-128 characters)`,
      );
    }
    pos++;
  }
  if (id.length > 128) {
    throw new InvalidError("conversation", `is ${id.length} characters long; at most 128 of [A-Za-z0-9_-] are allowed`);
  }
}

/** A decoded message: the canonical Message plus what the rules need of its source. */
interface Decoded {
  role: string;
  content: unknown; // parsed JSON; undefined when absent
  contentRaw: string | undefined;
  name: string;
  toolCalls: ToolCall[];
  toolCallId: string;
  reasoning: string;
  extraRaw: string | undefined;
  tokens: number;
  usage: Usage | undefined;
  contextGeneration: number | undefined;
  meta: Map<string, string> | undefined;
  contentRef: ContentRef | undefined;
  unknown: Map<string, unknown>;
}

/**
 * Parses and validates one stored (or to be published) message. Every error is an
 * InvalidError naming the field and the rule broken.
 */
export function decodeMessage(data: Uint8Array): Message {
  const off = badUTF8(data);
  if (off >= 0) throw new InvalidError("message", `is not valid UTF-8 (first bad byte at offset ${off})`);
  return decodeMessageText(utf8Text(data));
}

/** decodeMessage of text known to be valid Unicode. */
export function decodeMessageText(text: string): Message {
  let top: unknown;
  try {
    top = JSON.parse(text);
  } catch (e) {
    throw new InvalidError("message", `must be a JSON object: ${(e as Error).message}`);
  }
  if (top !== null && !isObject(top)) {
    throw new InvalidError("message", `must be a JSON object: not ${Array.isArray(top) ? "an array" : typeof top}`);
  }
  const d = decodeFields(top === null ? new Map() : memberMap(text));
  validate(d);
  return canonical(d);
}

function decodeFields(all: Map<string, string>): Decoded {
  const d: Decoded = {
    role: "",
    content: undefined,
    contentRaw: undefined,
    name: "",
    toolCalls: [],
    toolCallId: "",
    reasoning: "",
    extraRaw: undefined,
    tokens: 0,
    usage: undefined,
    contextGeneration: undefined,
    meta: undefined,
    contentRef: undefined,
    unknown: new Map(),
  };
  for (const k of MESSAGE_FIELDS) {
    const raw = all.get(k);
    if (raw === undefined) continue;
    try {
      decodeField(d, k, raw);
    } catch (e) {
      throw new InvalidError(k, `${FIELD_WANT[k]} (${(e as Error).message})`);
    }
  }
  for (const [k, raw] of all) {
    if (!KNOWN.has(k)) d.unknown.set(k, JSON.parse(raw));
  }
  return d;
}

function decodeField(d: Decoded, k: string, raw: string): void {
  switch (k) {
    case "role":
      d.role = stringFromText(raw, d.role);
      return;
    case "content":
      d.contentRaw = raw;
      d.content = JSON.parse(raw);
      return;
    case "name":
      d.name = stringFromText(raw, d.name);
      return;
    case "tool_calls":
      d.toolCalls = decodeToolCalls(raw);
      return;
    case "tool_call_id":
      d.toolCallId = stringFromText(raw, d.toolCallId);
      return;
    case "reasoning":
      d.reasoning = stringFromText(raw, d.reasoning);
      return;
    case "extra":
      if (!isNullText(raw)) d.extraRaw = raw;
      return;
    case "tokens":
      if (!isNullText(raw)) d.tokens = intFromText(raw, false);
      return;
    case "usage":
      d.usage = decodeUsage(raw);
      return;
    case "context_generation":
      if (!isNullText(raw)) d.contextGeneration = intFromText(raw, true);
      else d.contextGeneration = undefined;
      return;
    case "meta":
      d.meta = decodeMeta(raw);
      return;
    case "content_ref":
      d.contentRef = isNullText(raw) ? undefined : decodeContentRef(raw);
      return;
  }
}

function expectKind(raw: string, kind: string): void {
  if (kindOf(raw) !== kind) throw new Error(`${describe(raw)} is not ${kind === "{" ? "an object" : "an array"}`);
}

function decodeToolCalls(raw: string): ToolCall[] {
  if (isNullText(raw)) return [];
  expectKind(raw, "[");
  const parsed = JSON.parse(raw) as unknown[];
  const elems = parsed.length === 0 ? [] : rawElements(raw);
  return elems.map((e) => {
    const tc: ToolCall = { id: "", type: "" as "function", function: { name: "", arguments: "" } };
    if (isNullText(e)) return tc;
    expectKind(e, "{");
    forEachField(e, ["id", "type", "function"], (f, v) => {
      if (f === "id") tc.id = stringFromText(v, tc.id);
      else if (f === "type") tc.type = stringFromText(v, tc.type) as "function";
      else if (!isNullText(v)) {
        expectKind(v, "{");
        forEachField(v, ["name", "arguments"], (g, w) => {
          if (g === "name") tc.function.name = stringFromText(w, tc.function.name);
          else tc.function.arguments = stringFromText(w, tc.function.arguments);
        });
      }
    });
    return tc;
  });
}

function decodeUsage(raw: string): Usage | undefined {
  if (isNullText(raw)) return undefined;
  expectKind(raw, "{");
  const u: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  forEachField(raw, ["prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"], (f, v) => {
    if (!isNullText(v)) (u as unknown as Record<string, number>)[f] = intFromText(v, false);
  });
  return u;
}

function decodeMeta(raw: string): Map<string, string> | undefined {
  if (isNullText(raw)) return undefined;
  expectKind(raw, "{");
  const m = new Map<string, string>();
  for (const [k, v] of memberMap(raw)) m.set(k, stringFromText(v, ""));
  return m;
}

function decodeContentRef(raw: string): ContentRef {
  expectKind(raw, "{");
  const all = memberMap(raw);
  const ref: Record<string, unknown> = {};
  for (const key of ["bucket", "name", "size", "sha256", "tokens"]) {
    const v = all.get(key);
    if (v === undefined || isNullText(v)) throw new Error(`${key} is required`);
    try {
      ref[key] = key === "size" || key === "tokens" ? intFromText(v, false) : stringFromText(v, "");
    } catch (e) {
      throw new Error(`${key}: ${(e as Error).message}`);
    }
  }
  return ref as unknown as ContentRef;
}

function invalid(field: string, rule: string): never {
  throw new InvalidError(field, rule);
}

function validate(d: Decoded): void {
  if (d.role === "") invalid("role", "is required (system, user, assistant or tool)");
  if (!ROLES.has(d.role)) invalid("role", `unknown role ${JSON.stringify(d.role)}; must be system, user, assistant or tool`);
  validateContent(d);
  if (d.toolCalls.length > 0 && d.role !== "assistant") {
    invalid("tool_calls", `only assistant messages may call tools, not ${d.role}`);
  }
  const seen = new Set<string>();
  d.toolCalls.forEach((tc, i) => {
    const f = `tool_calls[${i}]`;
    if (tc.id === "") invalid(`${f}.id`, "must not be empty");
    if (seen.has(tc.id)) invalid(`${f}.id`, `${JSON.stringify(tc.id)} is used twice in the same message`);
    seen.add(tc.id);
    if (tc.type !== "function") invalid(`${f}.type`, `must be "function", not ${JSON.stringify(tc.type)}`);
    if (tc.function.name === "") invalid(`${f}.function.name`, "must not be empty");
  });
  if (d.role === "tool" && d.toolCallId === "") invalid("tool_call_id", "is required on a tool message");
  if (d.role !== "tool" && d.toolCallId !== "") invalid("tool_call_id", `is only allowed on a tool message, not ${d.role}`);
  if (d.extraRaw !== undefined && kindOf(d.extraRaw) !== "{") invalid("extra", "must be a JSON object");
  if (d.tokens < 0) invalid("tokens", "must not be negative");
  if (d.contentRef) validateContentRef(d.contentRef);
  const u = d.usage;
  if (u && (u.prompt_tokens < 0 || u.completion_tokens < 0 || (u.total_tokens ?? 0) < 0 || (u.cached_tokens ?? 0) < 0)) {
    invalid("usage", "token counts must not be negative");
  }
}

const PART_PAYLOAD: Record<string, string> = {
  text: "text",
  image_url: "image_url",
  input_audio: "input_audio",
  file: "file",
  refusal: "refusal",
};

function validateContent(d: Decoded): void {
  const c = d.content;
  if (c === undefined || c === null) {
    if (d.role === "assistant" && d.toolCalls.length > 0) return;
    invalid("content", `is required on a ${d.role} message (null is allowed only beside tool_calls)`);
  }
  if (typeof c === "string") return;
  if (!Array.isArray(c)) invalid("content", "must be a string, an array of content parts or null");
  c.forEach((p: unknown, i: number) => {
    const field = `content[${i}]`;
    if (!isObject(p)) invalid(field, "must be a JSON object");
    const typ = p["type"];
    if (typeof typ !== "string" || typ === "") invalid(`${field}.type`, "is required and must be a string");
    const need = Object.hasOwn(PART_PAYLOAD, typ) ? PART_PAYLOAD[typ] : undefined;
    if (need === undefined) return;
    if (!Object.hasOwn(p, need) || p[need] === null) invalid(`${field}.${need}`, `is required on a ${JSON.stringify(typ)} part`);
    if (typ === "text" && typeof p["text"] !== "string") invalid(`${field}.text`, "must be a string");
  });
}

const SHA256_HEX = /^[0-9a-f]{64}$/;
const BUCKET = /^[A-Za-z0-9_-]{1,255}$/;
/** The length of the smallest object, {"content":""}. */
export const MIN_OBJECT_SIZE = 14;

function validateContentRef(r: ContentRef): void {
  const slash = r.name.indexOf("/");
  const conv = slash >= 0 ? r.name.slice(0, slash) : "";
  const sum = slash >= 0 ? r.name.slice(slash + 1) : "";
  let convOK = true;
  try {
    validateConversationId(conv);
  } catch {
    convOK = false;
  }
  if (!BUCKET.test(r.bucket)) invalid("content_ref.bucket", "must be 1-255 characters of [A-Za-z0-9_-]");
  if (slash < 0 || !convOK || !SHA256_HEX.test(sum)) {
    invalid("content_ref.name", "must be <conversation>/<sha256 of the object in lower-case hex>");
  }
  if (!SHA256_HEX.test(r.sha256)) invalid("content_ref.sha256", "must be 64 lower-case hex digits");
  if (sum !== r.sha256) invalid("content_ref.name", `must end in the object's sha256 ${r.sha256}`);
  if (r.size < MIN_OBJECT_SIZE) {
    invalid("content_ref.size", `must be at least ${MIN_OBJECT_SIZE} bytes (an object holds at least {"content":""})`);
  }
  if (r.tokens < 0) invalid("content_ref.tokens", "must not be negative");
}

/** The message as the Go client encodes it: empty optional fields left out, unknown ones kept. */
function canonical(d: Decoded): Message {
  const m: Record<string, unknown> = { role: d.role, content: d.content === undefined ? null : d.content };
  if (d.name !== "") m["name"] = d.name;
  if (d.toolCalls.length > 0) m["tool_calls"] = d.toolCalls;
  if (d.toolCallId !== "") m["tool_call_id"] = d.toolCallId;
  if (d.reasoning !== "") m["reasoning"] = d.reasoning;
  if (d.extraRaw !== undefined) m["extra"] = JSON.parse(d.extraRaw);
  if (d.tokens !== 0) m["tokens"] = d.tokens;
  if (d.usage) {
    const u: Usage = { prompt_tokens: d.usage.prompt_tokens, completion_tokens: d.usage.completion_tokens };
    if (d.usage.total_tokens) u.total_tokens = d.usage.total_tokens;
    if (d.usage.cached_tokens) u.cached_tokens = d.usage.cached_tokens;
    m["usage"] = u;
  }
  if (d.contextGeneration !== undefined) m["context_generation"] = d.contextGeneration;
  if (d.meta && d.meta.size > 0) {
    const meta: Record<string, unknown> = {};
    for (const [k, v] of d.meta) setOwn(meta, k, v);
    m["meta"] = meta;
  }
  if (d.contentRef) {
    const r = d.contentRef;
    m["content_ref"] = { bucket: r.bucket, name: r.name, size: r.size, sha256: r.sha256, tokens: r.tokens };
  }
  for (const k of [...d.unknown.keys()].sort()) setOwn(m, k, d.unknown.get(k));
  return m as Message;
}

/** Encodes a canonical message as JSON. */
export function encodeMessage(m: Message): string {
  return JSON.stringify(m);
}

/** The UTF-8 bytes of encodeMessage. */
export function encodeMessageBytes(m: Message): Uint8Array {
  return utf8Bytes(encodeMessage(m));
}

/**
 * Checks a message handed to publish and returns it canonical. JavaScript strings can
 * hold what UTF-8 cannot (a lone surrogate); such a string is refused, as Go refuses
 * invalid UTF-8, rather than being stored as U+FFFD.
 */
export function checkMessage(input: unknown): Message {
  return checkMessageText(input).message;
}

/**
 * checkMessage and the canonical message's encoding (encodeMessageBytes of it), made
 * once: what publish sends, and its length is the size check.
 */
export function checkMessageEncoded(input: unknown): { message: Message; data: Uint8Array } {
  const { message, text } = checkMessageText(input);
  return { message, data: utf8Bytes(text) };
}

function checkMessageText(input: unknown): { message: Message; text: string } {
  if (!isObject(input)) throw new InvalidError("message", "must be a JSON object");
  wellFormed(input, "message", new Set());
  let text: string;
  try {
    text = JSON.stringify(input);
  } catch (e) {
    throw new InvalidError("message", `does not encode as JSON: ${(e as Error).message}`);
  }
  // JSON.stringify of an object writes an object, with no space before it: what
  // decodeMessageText would parse whole only to learn that, its fields are read from
  // (each parsed once). A toJSON may have written something else: that text is decoded
  // as any other.
  if (text.charCodeAt(0) !== 0x7b) {
    const message = decodeMessageText(text);
    return { message, text: encodeMessage(message) };
  }
  const d = decodeFields(memberMap(text));
  validate(d);
  const message = canonical(d);
  return { message, text: encodeCanonical(message, d) };
}

/**
 * encodeMessage of m, canonical(d), where d was decoded from text JSON.stringify wrote:
 * content and extra are written as that text has them instead of encoded again (JSON.stringify
 * writes what it parses back as it was), every other field as encodeMessage writes it,
 * in the same order (that of Object.entries, which JSON.stringify follows).
 */
function encodeCanonical(m: Message, d: Decoded): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(m)) {
    let raw: string;
    if (k === "content" && d.contentRaw !== undefined) raw = d.contentRaw;
    else if (k === "extra" && d.extraRaw !== undefined) raw = d.extraRaw;
    else raw = JSON.stringify(v);
    parts.push(`${JSON.stringify(k)}:${raw}`);
  }
  return `{${parts.join(",")}}`;
}

function wellFormed(v: unknown, path: string, seen: Set<unknown>): void {
  if (typeof v === "string") {
    if (!v.isWellFormed()) throw new InvalidError(path, "is not valid Unicode (a lone surrogate); encode binary data, e.g. as base64");
    return;
  }
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new InvalidError(path, `${v} is not a JSON number`);
    return;
  }
  if (typeof v === "bigint") throw new InvalidError(path, "a bigint is not a JSON number");
  if (typeof v !== "object" || v === null) return;
  if (seen.has(v)) throw new InvalidError(path, "holds a cycle");
  seen.add(v);
  if (Array.isArray(v)) v.forEach((e, i) => wellFormed(e, `${path}[${i}]`, seen));
  else if (typeof (v as { toJSON?: unknown }).toJSON !== "function") {
    for (const [k, e] of Object.entries(v)) {
      if (!k.isWellFormed()) throw new InvalidError(path, "has a key that is not valid Unicode");
      wellFormed(e, path === "message" ? k : `${path}.${k}`, seen);
    }
  }
  seen.delete(v);
}

/** The message without Compactor's metadata (tokens, usage, context_generation, meta). */
export function stripMetadata(m: Message): Message {
  const out = { ...m };
  delete out.tokens;
  delete out.usage;
  delete out.context_generation;
  delete out.meta;
  return out;
}

/** Whether m is an assistant message that calls tools. */
export function hasToolCalls(m: Message): boolean {
  return m.role === "assistant" && (m.tool_calls?.length ?? 0) > 0;
}

/** The content's text: a string's, or the text parts' joined by newlines. */
export function contentText(c: unknown): string {
  if (typeof c === "string") return c;
  if (!Array.isArray(c)) return "";
  const texts: string[] = [];
  for (const p of c as ContentPart[]) {
    if (isObject(p) && p.type === "text") texts.push(typeof p["text"] === "string" ? (p["text"] as string) : "");
  }
  return texts.join("\n");
}
