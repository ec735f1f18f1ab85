// The chars/4 token estimate of the Go client (schemas/tokens): a context's count is
// the same in every language.

import { runeCount } from "./json.js";
import { isObject } from "./json.js";
import type { ContentRef, Message } from "./types.js";

/** The fixed cost of one message (role, separators). */
export const PER_MESSAGE = 4;
/** The cost of one image, audio or file content part. */
export const PER_NON_TEXT_PART = 256;
/** The fixed cost of one tool call besides its name and arguments. */
export const PER_TOOL_CALL = 4;
/**
 * The most UTF-8 bytes of text one token is taken to stand for when a declared count is
 * checked against the content (see floorTokens).
 */
export const FLOOR_BYTES_PER_TOKEN = 8;
/** Bounds the bytes a stub's declared object size counts for. */
const MAX_FLOOR_BYTES = 2 ** 40;

/** Counts the tokens of a text. */
export type Counter = (text: string) => number;

/** The default counter: ceil(characters / 4), characters being Unicode code points. */
export const chars4: Counter = (text) => Math.floor((runeCount(text) + 3) / 4);

/**
 * A message's tokens: the producer's count when it set one, held to at least
 * floorTokens(m) (a declared count is a hint), else the estimate.
 */
export function messageTokens(m: Message, count: Counter = chars4): number {
  if (typeof m.tokens === "number" && m.tokens > 0) return Math.max(m.tokens, floorTokens(m));
  return estimateTokens(m, count);
}

/**
 * The estimate from the content: text counted, a fixed cost per non-text part, the
 * reasoning, the name and every tool call. A stub counts its reference's tokens in
 * place of its content and reasoning, held to at least a token per
 * FLOOR_BYTES_PER_TOKEN bytes of its object.
 */
export function estimateTokens(m: Message, count: Counter = chars4): number {
  let n = PER_MESSAGE + count(m.name ?? "");
  n += m.content_ref ? Math.max(m.content_ref.tokens, refFloor(m.content_ref)) : storedTokens(m, count);
  for (const tc of m.tool_calls ?? []) n += PER_TOOL_CALL + count(tc.function.name) + count(tc.function.arguments);
  return n;
}

/** The estimate of what a stub's object holds (content and reasoning): its reference's tokens. */
export function storedTokens(m: Message, count: Counter = chars4): number {
  let n = count(m.reasoning ?? "");
  const c = m.content;
  if (typeof c === "string") n += count(c);
  else if (Array.isArray(c)) {
    for (const p of c) {
      if (isObject(p) && p.type === "text") n += count(typeof p["text"] === "string" ? (p["text"] as string) : "");
      n += partEstimate(p);
    }
  }
  return n;
}

/**
 * The fewest tokens the content of m is taken to hold, whatever its producer declares
 * (Go's tokens.Floor): a token per FLOOR_BYTES_PER_TOKEN UTF-8 bytes (not UTF-16 code
 * units) of its text (the name, the content's text, the reasoning, the tool calls' names
 * and arguments, what a content part holds beside its text or media: see partBytes),
 * rounded up. A stub
 * counts its object's size in place of its content and reasoning.
 */
export function floorTokens(m: Message): number {
  let b = utf8Length(m.name ?? "");
  for (const tc of m.tool_calls ?? []) b += utf8Length(tc.function.name) + utf8Length(tc.function.arguments);
  if (m.content_ref) return bytesFloor(b) + refFloor(m.content_ref);
  b += utf8Length(m.reasoning ?? "");
  const c = m.content;
  if (typeof c === "string") b += utf8Length(c);
  else if (Array.isArray(c)) {
    for (const p of c) b += partBytes(p);
  }
  return bytesFloor(b);
}

/** Part types whose payload is media, counted by a model by its size, not its bytes. */
const MEDIA_PARTS = new Set(["image_url", "image", "input_audio", "audio", "file"]);
/** The fields that hold a media part's payload. */
const PAYLOAD_KEYS = new Set(["url", "data", "file_data", "image_url", "image"]);

/**
 * How many bytes of a content part a model is sent as text, for the floor (Go's
 * tokens.PartBytes): a text part's text and its other fields; a media part its fields
 * beside the payload; any other part its whole JSON.
 */
export function partBytes(p: unknown): number {
  if (!isObject(p)) return utf8Length(JSON.stringify(p) ?? "");
  if (p.type === "text") return (typeof p["text"] === "string" ? utf8Length(p["text"] as string) : 0) + partFields(p);
  if (typeof p.type === "string" && MEDIA_PARTS.has(p.type)) return mediaFields(p);
  return utf8Length(JSON.stringify(p));
}

/** The chars/4 estimate of a part but a text part's text (Go's partEstimate). */
function partEstimate(p: unknown): number {
  if (isObject(p) && p.type === "text") return Math.floor((partFields(p) + 3) / 4);
  if (isObject(p) && typeof p.type === "string" && MEDIA_PARTS.has(p.type)) {
    return PER_NON_TEXT_PART + Math.floor((Math.max(mediaFields(p) - 4 * PER_NON_TEXT_PART, 0) + 3) / 4);
  }
  return PER_NON_TEXT_PART + Math.floor((utf8Length(JSON.stringify(p) ?? "") + 3) / 4);
}

/** The bytes of a part's fields but its type (and a text part's text): name and JSON value. */
function partFields(p: Record<string, unknown>): number {
  let n = 0;
  for (const [k, v] of Object.entries(p)) {
    if (k === "type" || (k === "text" && p.type === "text")) continue;
    n += utf8Length(k) + utf8Length(JSON.stringify(v) ?? "");
  }
  return n;
}

/** What a media part holds beside its payload. */
function mediaFields(p: Record<string, unknown>): number {
  return Math.max(partFields(p) - payloadLength(p), 0);
}

/** The JSON length of the longest string under a payload key: a media part's payload. */
function payloadLength(v: unknown): number {
  let best = 0;
  const walk = (x: unknown): void => {
    if (Array.isArray(x)) x.forEach(walk);
    else if (isObject(x)) {
      for (const [k, e] of Object.entries(x)) {
        if (typeof e === "string" && PAYLOAD_KEYS.has(k)) best = Math.max(best, utf8Length(JSON.stringify(e)));
        else walk(e);
      }
    }
  };
  walk(v);
  return best;
}

/** The length of s in UTF-8 bytes, as Go's len counts a string. */
export function utf8Length(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

function bytesFloor(b: number): number {
  return Math.floor((b + FLOOR_BYTES_PER_TOKEN - 1) / FLOOR_BYTES_PER_TOKEN);
}

function refFloor(r: ContentRef): number {
  return bytesFloor(Math.min(Math.max(r.size, 0), MAX_FLOOR_BYTES));
}
