// Steps 2-6 of the reader algorithm (the Go client's schemas/assemble), pure: loaded
// inputs in, the context a model is sent out.

import { contentText, stripMetadata } from "./message.js";
import { normalize, type Entry } from "./rounds.js";
import { chars4, messageTokens, type Counter } from "./tokens.js";
import type { Context, Message, Override, Role, Skipped } from "./types.js";
import type { ValueView } from "./value.js";
import { isObject } from "./json.js";

/** Starts the summary message, so the model knows what it is reading. */
export const SUMMARY_PREFIX =
  "[Summary of the earlier conversation, written by Compactor. The messages it replaces are not shown.]\n\n";

/**
 * The text of the summary message: SUMMARY_PREFIX, the summary and, when the value has
 * one, a blank line and its evidence section (evidence_text).
 */
export function summaryText(summary: string, evidenceText: string): string {
  return SUMMARY_PREFIX + summary + (evidenceText ? "\n\n" + evidenceText : "");
}

/** What a reader loaded. */
export interface AssembleInput {
  /** The conversation's value; null when it was never compacted. */
  value: ValueView | null;
  /** The entries at value.pinnedSeqs (covered by the summary but kept verbatim). */
  pinned: Entry[];
  /** Every entry from value.tailStartSeq on (the whole history without a value). */
  tail: Entry[];
}

export interface AssembleOptions {
  /** Keep Compactor's metadata (tokens, usage, context_generation, meta). */
  raw?: boolean;
  /** Cut the context at read time to fit this many tokens; the result is flagged degraded. */
  maxTokens?: number;
  /** Counts tokens for Context.tokens and maxTokens (default chars/4). */
  counter?: Counter;
}

/**
 * Assembles "pinned + summary + tail". Pinned entries are ordered by sequence; one
 * that is also in the tail is shown only there, and pinned entries go through the same
 * tool-round rules as the tail.
 */
export function assemble(input: AssembleInput, opts: AssembleOptions = {}): Context {
  const count = opts.counter ?? chars4;
  const c: Context = {
    messages: [],
    seqs: [],
    generation: input.value?.generation ?? 0,
    tailStartSeq: input.value?.tailStartSeq ?? 0,
    hasSummary: false,
    tokens: 0,
    degraded: false,
    skipped: [],
  };
  const toks: number[] = [];
  const overrides = new Map<number, Override>();
  for (const o of input.value?.overrides ?? []) overrides.set(o.seq, o);
  const add = (e: Entry) => {
    let m = e.message!;
    const o = overrides.get(e.seq);
    if (o) m = applyOverride(m, o);
    toks.push(messageTokens(m, count));
    c.messages.push(opts.raw ? m : stripMetadata(m));
    c.seqs.push(e.seq);
  };

  const inTail = new Set(input.tail.map((e) => e.seq));
  const pinned = input.pinned
    .filter((e) => !inTail.has(e.seq))
    .map((e, i) => ({ e, i }))
    .sort((a, b) => a.e.seq - b.e.seq || a.i - b.i)
    .map(({ e }) => e)
    .filter((e, i, all) => i === 0 || all[i - 1]!.seq !== e.seq);
  const p = normalize(pinned);
  for (const s of p.skipped) c.skipped.push({ seq: s.seq, reason: `pinned: ${s.reason}` });
  p.kept.forEach(add);

  const v = input.value;
  if (v && v.summary !== "") {
    const m: Message = { role: (v.summaryRole || "user") as Role, content: summaryText(v.summary, v.evidenceText) };
    c.messages.push(m);
    c.seqs.push(0);
    toks.push(messageTokens(m, count));
    c.hasSummary = true;
  }
  const t = normalize(input.tail);
  c.skipped.push(...t.skipped);
  t.kept.forEach(add);
  c.tokens = toks.reduce((a, b) => a + b, 0);
  if (opts.maxTokens && opts.maxTokens > 0 && c.tokens > opts.maxTokens) shrink(c, toks, opts.maxTokens, count);
  return c;
}

/**
 * Applies a truncation to a message's text. String content is cut in place; array
 * content has its text parts joined and cut into one text part, placed where the
 * first text part was, and keeps its non-text parts.
 */
export function applyOverride(m: Message, o: Override, text = contentText(m.content)): Message {
  const [cut, changed] = truncate(text, o.keep_head, o.keep_tail, o.note ?? "");
  if (!changed) return m;
  const out: Message = { ...m };
  delete out.tokens; // the producer's count no longer applies
  if (!Array.isArray(m.content)) {
    out.content = cut;
    return out;
  }
  let placed = false;
  out.content = m.content.flatMap((part) => {
    if (!isObject(part) || part.type !== "text") return [part];
    if (placed) return [];
    placed = true;
    return [{ type: "text", text: cut }];
  });
  return out;
}

/**
 * Keeps the first head and last tail characters (code points) of s with a marker
 * between them that says how much was cut; false when s is short enough already.
 */
export function truncate(s: string, head: number, tail: number, note: string): [string, boolean] {
  head = Math.max(head, 0);
  tail = Math.max(tail, 0);
  const chars = Array.from(s);
  const n = chars.length;
  if (n <= head + tail) return [s, false];
  const marker = `\n[… ${n - head - tail} characters cut by Compactor${note ? ": " + note : ""} …]\n`;
  return [chars.slice(0, head).join("") + marker + chars.slice(n - tail).join(""), true];
}

/** How many characters of head and tail a read-time cut keeps at the least. */
const MIN_KEEP = 200;
/** About the length of the marker a read-time cut inserts. */
const MARKER_ROOM = 100;
const READ_TIME_NOTE = "cut at read time to fit the caller's token budget";

/**
 * Cuts the context until it fits budget tokens, or nothing more can be cut: first the
 * oldest tool outputs, then the largest messages. Every cut starts from the message as
 * it was before shrinking, and keeps at least 2×MIN_KEEP characters of its text.
 */
function shrink(c: Context, toks: number[], budget: number, count: Counter): void {
  c.degraded = true;
  const orig = c.messages.slice();
  const texts = orig.map((m) => contentText(m.content));
  const lens = texts.map((t) => Array.from(t).length);
  const kept = lens.slice();
  const over = () => c.tokens - budget;
  const cut = (i: number, need: number) => {
    if (kept[i]! <= 2 * MIN_KEEP) return;
    let keep = kept[i]! - need * 4;
    if (kept[i] === lens[i]) keep -= MARKER_ROOM;
    keep = Math.max(keep, 2 * MIN_KEEP);
    kept[i] = keep;
    const head = Math.floor(keep / 2);
    const m = applyOverride(orig[i]!, { seq: 0, keep_head: head, keep_tail: keep - head, note: READ_TIME_NOTE }, texts[i]);
    const t = messageTokens(m, count);
    c.tokens += t - toks[i]!;
    c.messages[i] = m;
    toks[i] = t;
  };
  for (let i = 0; i < c.messages.length; i++) {
    if (over() <= 0) return;
    if (c.messages[i]!.role === "tool") cut(i, over());
  }
  while (over() > 0) {
    let best = -1;
    for (let i = 0; i < c.messages.length; i++) {
      if (kept[i]! > 2 * MIN_KEEP && (best < 0 || toks[i]! > toks[best]!)) best = i;
    }
    if (best < 0) return;
    cut(best, over());
  }
}

export type { Skipped };
