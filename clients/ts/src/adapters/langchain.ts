// @compactor/client/langchain: a LangChain.js chat message history (@langchain/core)
// backed by Compactor.
//
//   import { CompactorChatMessageHistory } from "@compactor/client/langchain";
//   const history = new CompactorChatMessageHistory(c, "conv-1");
//   await history.addMessage(new HumanMessage("hi"));
//   const reply = await model.invoke(await history.getMessages());
//
// addMessage(s) publish to the conversation; getMessages returns its compacted context
// (pinned messages, the summary, the recent messages) as LangChain messages, an
// AIMessage's tool_calls with the ToolMessages that answer them.

import { BaseListChatMessageHistory } from "@langchain/core/chat_history";
import { AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { Compactor } from "../client.js";
import { InvalidError } from "../errors.js";
import type { ContentPart, Context, Message, Role, ToolCall } from "../types.js";
import { textOf, type AdapterOptions } from "./common.js";

export type CompactorChatMessageHistoryOptions = AdapterOptions;

/** A HumanMessage's content blocks. */
type HumanBlocks = Extract<ConstructorParameters<typeof HumanMessage>[0], unknown[]>;

/**
 * A chat message history whose messages are conversation conv in Compactor: what is
 * added is published, what is read is the compacted context, not every message ever
 * added. clear forgets the conversation (compactor forget: deleted everywhere, for
 * good; what is added next starts it anew).
 */
export class CompactorChatMessageHistory extends BaseListChatMessageHistory {
  lc_namespace = ["langchain", "stores", "message", "compactor"];
  /** The sequence of the last message published here: getMessages reads its own writes. */
  private lastSeq = 0;
  /** The generation of the last context read: an AI message's usage is counted against it. */
  private generation: number | undefined;

  constructor(
    private readonly c: Compactor,
    private readonly conv: string,
    private readonly opts: CompactorChatMessageHistoryOptions = {},
  ) {
    super();
  }

  /** The compacted context as LangChain messages. */
  async getMessages(): Promise<BaseMessage[]> {
    const cx = await this.c.context(this.conv, {
      atLeastSeq: this.lastSeq,
      maxTokens: this.opts.maxTokens,
      waitPendingMs: this.opts.waitPendingMs,
      counter: this.opts.counter,
    });
    this.generation = cx.generation;
    return toLangChain(cx);
  }

  async addMessage(message: BaseMessage): Promise<void> {
    await this.addMessages([message]);
  }

  /** Publishes the messages, in order. */
  override async addMessages(messages: BaseMessage[]): Promise<void> {
    const msgs = messages.map(fromLangChain);
    if (msgs.length === 0) return;
    for (const m of msgs) if (m.usage && this.generation !== undefined) m.context_generation = this.generation;
    const acks = await this.c.publishAll(this.conv, msgs);
    this.lastSeq = acks[acks.length - 1]!.seq;
  }

  /** Forgets the conversation (compactor forget): every message, summary and policy, for good. */
  override async clear(): Promise<void> {
    await this.c.forget(this.conv);
    this.lastSeq = 0;
    this.generation = undefined;
  }
}

const CHAT_ROLES: Record<string, Role> = { human: "user", user: "user", ai: "assistant", assistant: "assistant", system: "system", tool: "tool" };

/**
 * A LangChain message as a chat message: HumanMessage user, AIMessage assistant (its
 * tool_calls with their args as JSON text, its usage_metadata as usage), ToolMessage
 * tool, SystemMessage system, a ChatMessage by its role.
 */
export function fromLangChain(m: BaseMessage): Message {
  if (AIMessage.isInstance(m)) {
    const calls: ToolCall[] = (m.tool_calls ?? []).map((tc) => ({ id: tc.id ?? "", type: "function", function: { name: tc.name, arguments: JSON.stringify(tc.args ?? {}) } }));
    const out: Message = { role: "assistant", content: calls.length > 0 && contentOf(m) === "" ? null : contentOf(m) };
    if (calls.length > 0) out.tool_calls = calls;
    const u = m.usage_metadata;
    if (u && typeof u.input_tokens === "number") out.usage = { prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens ?? 0 };
    return out;
  }
  if (ToolMessage.isInstance(m)) {
    const out: Message = { role: "tool", tool_call_id: m.tool_call_id, content: textContent(m.content) };
    if (m.name) out.name = m.name;
    return out;
  }
  if (HumanMessage.isInstance(m)) return { role: "user", content: contentOf(m) };
  if (SystemMessage.isInstance(m)) return { role: "system", content: textContent(m.content) };
  if (ChatMessage.isInstance(m)) {
    const role = CHAT_ROLES[m.role];
    if (role && role !== "tool") return { role, content: contentOf(m) };
    throw new InvalidError("message", `a ChatMessage of role ${JSON.stringify(m.role)} has no chat role (user, assistant, system)`);
  }
  throw new InvalidError("message", `a LangChain message of type ${JSON.stringify(m.type)} is not a human, ai, tool, system or chat message`);
}

/** A message's content: its text, or its text and image_url blocks. */
function contentOf(m: BaseMessage): string | ContentPart[] {
  const c = m.content;
  if (typeof c === "string") return c;
  const blocks = c as Array<Record<string, unknown>>;
  if (blocks.every((b) => b["type"] === "text")) return textContent(c);
  return blocks.map((b): ContentPart => {
    if (b["type"] === "text") return { type: "text", text: String(b["text"] ?? "") };
    if (b["type"] === "image_url") return { type: "image_url", image_url: b["image_url"] };
    return { type: "text", text: `[${String(b["type"])}]` };
  });
}

function textContent(c: BaseMessage["content"]): string {
  if (typeof c === "string") return c;
  return (c as Array<Record<string, unknown>>)
    .filter((b) => b["type"] === "text")
    .map((b) => String(b["text"] ?? ""))
    .join("");
}

/**
 * A context as LangChain messages: SystemMessage, HumanMessage (the summary keeps the
 * role the reader gives it), AIMessage with tool_calls (args parsed from their JSON),
 * ToolMessage with the tool_call_id it answers and its tool's name.
 */
export function toLangChain(cx: Pick<Context, "messages">): BaseMessage[] {
  const names = new Map<string, string>();
  const out: BaseMessage[] = [];
  for (const m of cx.messages) {
    switch (m.role) {
      case "system":
        out.push(new SystemMessage(textOf(m)));
        break;
      case "user":
        out.push(new HumanMessage(Array.isArray(m.content) ? (m.content as unknown as HumanBlocks) : textOf(m)));
        break;
      case "assistant": {
        const tool_calls = (m.tool_calls ?? []).map((tc) => {
          names.set(tc.id, tc.function.name);
          return { id: tc.id, name: tc.function.name, args: parseArgs(tc.function.arguments), type: "tool_call" as const };
        });
        out.push(new AIMessage({ content: textOf(m), tool_calls }));
        break;
      }
      case "tool":
        out.push(new ToolMessage({ content: textOf(m), tool_call_id: m.tool_call_id ?? "", name: names.get(m.tool_call_id ?? "") ?? m.name }));
        break;
    }
  }
  return out;
}

/** Tool call arguments as LangChain's args: the parsed JSON object ({} when not an object). */
function parseArgs(args: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(args === "" ? "{}" : args);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : { input: v };
  } catch {
    return { input: args };
  }
}
