// @compactor/client/openai-agents: a Session of the OpenAI Agents SDK (@openai/agents)
// backed by Compactor.
//
//   import { Agent, run } from "@openai/agents";
//   import { CompactorSession } from "@compactor/client/openai-agents";
//   const result = await run(agent, "hi", { session: new CompactorSession(c, "conv-1") });
//
// addItems publishes the items the runner saves (input, model output, tool calls and
// their results) to the conversation; getItems returns its compacted context (pinned
// messages, the summary, the recent messages) as input items, each function_call with
// its function_call_result.

import type { AgentInputItem, Session } from "@openai/agents";
import type { Compactor } from "../client.js";
import { CompactorError } from "../errors.js";
import type { ContentPart, Context, Message, ToolCall } from "../types.js";
import { textOf, toolNames, type AdapterOptions } from "./common.js";

/** The key of a message's `extra` that carries an item this adapter does not convert, as it was. */
export const ITEM_EXTRA_KEY = "openai_agents_item";

type Item = AgentInputItem;
type UserItem = Extract<Item, { role: "user" }>;
type FunctionResultItem = Extract<Item, { type: "function_call_result" }>;

export type CompactorSessionOptions = AdapterOptions;

/**
 * A Session whose items are conversation conv as Compactor stores it. getItems returns
 * the compacted context, not every item ever added; popItem is refused (a Compactor
 * conversation is append-only) and clearSession forgets the conversation (compactor
 * forget: deleted everywhere, for good; what is added next starts it anew).
 */
export class CompactorSession implements Session {
  /** The sequence of the last message this session published: getItems reads its own writes. */
  private lastSeq = 0;

  constructor(
    private readonly c: Compactor,
    private readonly conv: string,
    private readonly opts: CompactorSessionOptions = {},
  ) {}

  async getSessionId(): Promise<string> {
    return this.conv;
  }

  /** The compacted context as input items; with limit, the newest limit items, no result without its call. */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    const cx = await this.c.context(this.conv, {
      atLeastSeq: this.lastSeq,
      maxTokens: this.opts.maxTokens,
      waitPendingMs: this.opts.waitPendingMs,
      counter: this.opts.counter,
    });
    const items = toItems(cx);
    if (limit === undefined) return items;
    if (!Number.isSafeInteger(limit) || limit < 0) throw new CompactorError(`getItems: limit must be a non-negative integer, not ${limit}`);
    let from = Math.max(0, items.length - limit);
    while (from < items.length && items[from]!.type === "function_call_result") from++;
    return items.slice(from);
  }

  /** Publishes the items, in order: an assistant's text and the calls it made are one message. */
  async addItems(items: AgentInputItem[]): Promise<void> {
    const msgs = fromItems(items);
    if (msgs.length === 0) return;
    const acks = await this.c.publishAll(this.conv, msgs);
    this.lastSeq = acks[acks.length - 1]!.seq;
  }

  /** Refused: a Compactor conversation is append-only. */
  async popItem(): Promise<AgentInputItem | undefined> {
    throw new CompactorError("popItem: a Compactor conversation is append-only, its last item cannot be removed; clearSession forgets the whole conversation");
  }

  /** Forgets the conversation (compactor forget): every message, summary and policy, for good. */
  async clearSession(): Promise<void> {
    await this.c.forget(this.conv);
    this.lastSeq = 0;
  }
}

/**
 * Input items as chat messages: an assistant message and the function calls after it
 * are one assistant message with tool calls, a reasoning item goes into the next
 * assistant message's reasoning, a function_call_result is a tool message. Other items
 * (hosted tools, computer, shell, ...) are kept whole in an assistant message's extra.
 */
export function fromItems(items: AgentInputItem[]): Message[] {
  const out: Message[] = [];
  let assistant: Message | undefined; // the assistant message function calls join
  let reasoning = "";
  const flush = () => {
    assistant = undefined;
  };
  const current = (): Message => {
    if (!assistant) {
      assistant = { role: "assistant", content: null };
      if (reasoning) assistant.reasoning = reasoning;
      reasoning = "";
      out.push(assistant);
    }
    return assistant;
  };
  for (const it of items) {
    if ("role" in it && (it.type === undefined || it.type === "message")) {
      if (it.role === "assistant") {
        flush();
        const m = current();
        m.content = it.content.map((p) => (p.type === "output_text" ? p.text : p.type === "refusal" ? p.refusal : "")).join("");
        continue;
      }
      flush();
      if (it.role === "system") out.push({ role: "system", content: it.content });
      else if (it.role === "user") out.push({ role: "user", content: userContent(it.content) });
      continue;
    }
    switch (it.type) {
      case "function_call": {
        const m = current();
        const tc: ToolCall = { id: it.callId, type: "function", function: { name: it.name, arguments: it.arguments } };
        m.tool_calls = [...(m.tool_calls ?? []), tc];
        break;
      }
      case "function_call_result":
        flush();
        out.push({ role: "tool", tool_call_id: it.callId, name: it.name, content: outputText(it.output) });
        break;
      case "reasoning":
        flush();
        reasoning += it.content.map((p) => p.text).join("");
        break;
      default:
        flush();
        out.push({ role: "assistant", content: `[${String(it.type)} item]`, extra: { [ITEM_EXTRA_KEY]: JSON.parse(JSON.stringify(it)) } });
    }
  }
  return out;
}

function userContent(c: UserItem["content"]): string | ContentPart[] {
  if (typeof c === "string") return c;
  if (c.every((p) => p.type === "input_text")) return c.map((p) => (p as { text: string }).text).join("");
  return c.map((p): ContentPart => {
    if (p.type === "input_text") return { type: "text", text: p.text };
    if (p.type === "input_image" && typeof p.image === "string") return { type: "image_url", image_url: { url: p.image } };
    return { type: "text", text: `[${p.type}]` };
  });
}

/** A function call's output as the text a tool message holds. */
function outputText(o: FunctionResultItem["output"]): string {
  if (typeof o === "string") return o;
  const parts = Array.isArray(o) ? o : [o];
  return parts.map((p) => ("text" in p && typeof p.text === "string" ? p.text : JSON.stringify(p))).join("\n");
}

/**
 * A context as input items: system, user and assistant messages (the summary in the role
 * the reader gives it), an assistant's tool calls as function_call items after its text,
 * each tool message as the function_call_result of its call. An item kept in extra comes
 * back as it was added.
 */
export function toItems(cx: Pick<Context, "messages">): AgentInputItem[] {
  const names = toolNames(cx.messages);
  const out: AgentInputItem[] = [];
  for (const m of cx.messages) {
    const kept = m.extra?.[ITEM_EXTRA_KEY];
    if (m.role === "assistant" && kept && typeof kept === "object") {
      out.push(kept as AgentInputItem);
      continue;
    }
    switch (m.role) {
      case "system":
        out.push({ role: "system", content: textOf(m) });
        break;
      case "user":
        out.push({ role: "user", content: userItemContent(m) });
        break;
      case "assistant": {
        const text = textOf(m);
        if (text !== "" || !m.tool_calls?.length) out.push({ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] });
        for (const tc of m.tool_calls ?? []) out.push({ type: "function_call", callId: tc.id, name: tc.function.name, arguments: tc.function.arguments, status: "completed" });
        break;
      }
      case "tool":
        out.push({
          type: "function_call_result",
          callId: m.tool_call_id ?? "",
          name: names.get(m.tool_call_id ?? "") ?? m.name ?? "",
          status: "completed",
          output: { type: "text", text: textOf(m) },
        });
        break;
    }
  }
  return out;
}

function userItemContent(m: Message): UserItem["content"] {
  if (!Array.isArray(m.content)) return textOf(m);
  const out: Exclude<UserItem["content"], string> = [];
  for (const p of m.content) {
    if (p.type === "text" && typeof p["text"] === "string") out.push({ type: "input_text", text: p["text"] });
    else if (p.type === "image_url") {
      const url = (p["image_url"] as { url?: unknown } | undefined)?.url;
      if (typeof url === "string") out.push({ type: "input_image", image: url });
    }
  }
  return out;
}
