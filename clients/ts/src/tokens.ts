// The chars/4 token estimate of the Go client (schemas/tokens): a context's count is
// the same in every language.

import { runeCount } from "./json.js";
import { isObject } from "./json.js";
import type { Message } from "./types.js";

/** The fixed cost of one message (role, separators). */
export const PER_MESSAGE = 4;
/** The cost of one image, audio or file content part. */
export const PER_NON_TEXT_PART = 256;
/** The fixed cost of one tool call besides its name and arguments. */
export const PER_TOOL_CALL = 4;

/** Counts the tokens of a text. */
export type Counter = (text: string) => number;

/** The default counter: ceil(characters / 4), characters being Unicode code points. */
export const chars4: Counter = (text) => Math.floor((runeCount(text) + 3) / 4);

/** A message's tokens: the producer's count when it set one, else the estimate. */
export function messageTokens(m: Message, count: Counter = chars4): number {
  if (typeof m.tokens === "number" && m.tokens > 0) return m.tokens;
  return estimateTokens(m, count);
}

/**
 * The estimate from the content: text counted, a fixed cost per non-text part, the
 * reasoning, the name and every tool call. A stub counts its reference's tokens in
 * place of its content and reasoning.
 */
export function estimateTokens(m: Message, count: Counter = chars4): number {
  let n = PER_MESSAGE + count(m.name ?? "");
  n += m.content_ref ? m.content_ref.tokens : storedTokens(m, count);
  for (const tc of m.tool_calls ?? []) n += PER_TOOL_CALL + count(tc.function.name) + count(tc.function.arguments);
  return n;
}

/** The estimate of what a stub's object holds (content and reasoning): its reference's tokens. */
export function storedTokens(m: Message, count: Counter = chars4): number {
  let n = count(m.reasoning ?? "");
  const c = m.content;
  if (typeof c === "string") n += count(c);
  else if (Array.isArray(c)) {
    for (const p of c) n += isObject(p) && p.type === "text" ? count(typeof p["text"] === "string" ? (p["text"] as string) : "") : PER_NON_TEXT_PART;
  }
  return n;
}
