// What the framework adapters share: which of the messages a framework hands over are
// new to the conversation, and the tool names of a context's tool results. No framework
// is imported here.

import type { Compactor, ContextOptions } from "../client.js";
import { contentText } from "../message.js";
import type { Context, Message } from "../types.js";

/** How an adapter reads the compacted context it gives the model. */
export interface AdapterOptions {
  /** Cut the context at read time to fit this many tokens (ContextOptions.maxTokens). */
  maxTokens?: number;
  /** Wait up to this long for a pending compaction before reading (ContextOptions.waitPendingMs). */
  waitPendingMs?: number;
  /** Counts tokens for maxTokens (ContextOptions.counter). */
  counter?: ContextOptions["counter"];
}

/** The key two messages are the same by: role, text, tool calls, tool call id. */
export function fingerprint(m: Message): string {
  return JSON.stringify([
    m.role,
    contentText(m.content ?? null),
    (m.tool_calls ?? []).map((tc) => [tc.id, tc.function.name, normalArgs(tc.function.arguments)]),
    m.tool_call_id ?? "",
  ]);
}

/** Tool call arguments as one JSON text: the same object parsed or as text compares equal. */
export function normalArgs(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args));
  } catch {
    return args;
  }
}

/**
 * What one conversation holds as an adapter has seen it: the fingerprints of the
 * messages published or read, in order, and of the system messages. A framework hands
 * over either the whole history every call or only what is new; both work: the new
 * messages are those after the newest known message in what was handed over (all of
 * them when none is known). A system message is published once (the first time its
 * text is seen).
 */
export class Known {
  private tail: Array<{ role: string; print: string }> = [];
  private systems = new Set<string>();
  private loaded = false;

  constructor(
    private readonly c: Compactor,
    private readonly conv: string,
  ) {}

  /** Learns the conversation's stored tail and system messages, once per Known. */
  async load(): Promise<void> {
    if (this.loaded) return;
    const cx = await this.c.context(this.conv);
    this.learn(cx);
    this.loaded = true;
  }

  /**
   * Takes what a context read shows as known: its system messages, and its tail (the
   * messages after the summary; pinned ones come before it, out of their order).
   */
  learn(cx: Context): void {
    const tail: Array<{ role: string; print: string }> = [];
    cx.messages.forEach((m, i) => {
      const seq = cx.seqs[i] ?? 0;
      if (seq === 0) return; // the summary: never published
      if (m.role === "system") this.systems.add(fingerprint(m));
      else if (seq >= cx.tailStartSeq) tail.push({ role: m.role, print: fingerprint(m) });
    });
    this.tail = tail;
  }

  /** The messages of incoming that the conversation does not hold yet. */
  fresh(incoming: Message[]): Message[] {
    const out: Message[] = [];
    const rest: Message[] = [];
    for (const m of incoming) {
      if (m.role !== "system") rest.push(m);
      else if (!this.systems.has(fingerprint(m))) out.push(m);
    }
    const prints = rest.map(fingerprint);
    return [...out, ...rest.slice(this.overlap(prints))];
  }

  /**
   * Where the new messages start: after the last of prints that is the newest known
   * message. When that one is not among them (a history that left it out), after the
   * last that is an older known assistant or tool message; a user's message is no
   * anchor but the newest, so a user who says again what they said before ("yes") is
   * heard again.
   */
  private overlap(prints: string[]): number {
    for (let k = this.tail.length - 1; k >= 0; k--) {
      const { role, print } = this.tail[k]!;
      if (k < this.tail.length - 1 && role === "user") continue;
      const at = prints.lastIndexOf(print);
      if (at >= 0) return at + 1;
    }
    return 0;
  }

  /** Records published messages as known. */
  add(ms: Message[]): void {
    for (const m of ms) {
      if (m.role === "system") this.systems.add(fingerprint(m));
      else this.tail.push({ role: m.role, print: fingerprint(m) });
    }
  }
}

/**
 * Publishes the new messages of incoming, then reads the compacted context (with what
 * was just published in it).
 */
export async function publishAndRead(c: Compactor, conv: string, known: Known, incoming: Message[], opts: AdapterOptions): Promise<Context> {
  await known.load();
  const fresh = known.fresh(incoming);
  let atLeastSeq = 0;
  if (fresh.length > 0) {
    const acks = await c.publishAll(conv, fresh);
    atLeastSeq = acks[acks.length - 1]!.seq;
    known.add(fresh);
  }
  return readFor(c, conv, known, atLeastSeq, opts);
}

/** Reads the context the model is sent, and takes its tail as known. */
export async function readFor(c: Compactor, conv: string, known: Known, atLeastSeq: number, opts: AdapterOptions): Promise<Context> {
  const cx = await c.context(conv, {
    atLeastSeq,
    maxTokens: opts.maxTokens,
    waitPendingMs: opts.waitPendingMs,
    counter: opts.counter,
  });
  known.learn(cx);
  return cx;
}

/** The name of each tool call of the assistant messages, by call id. */
export function toolNames(messages: Message[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of messages) for (const tc of m.tool_calls ?? []) names.set(tc.id, tc.function.name);
  return names;
}

/** A message's content as one text (parts that are not text are left out). */
export function textOf(m: Message): string {
  return contentText(m.content ?? null);
}
