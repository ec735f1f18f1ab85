// @compactor/client/ai-sdk: Compactor as an AI SDK (`ai`) language-model middleware.
//
//   import { wrapLanguageModel, generateText } from "ai";
//   import { compactorMiddleware } from "@compactor/client/ai-sdk";
//   const model = wrapLanguageModel({ model: openai("gpt-4o"), middleware: compactorMiddleware(c, "conv-1") });
//
// Before each model call the middleware publishes the prompt's messages the
// conversation does not hold yet and sends the model the compacted context instead of
// the prompt, after the call's own system messages (instructions: sent every call, not
// published); after the call it publishes the model's reply (text, reasoning, tool
// calls). Tool results come back in the next call's prompt and are published then.

import type { LanguageModelMiddleware } from "ai";
import type { Compactor } from "../client.js";
import type { ContentPart, Context, Message, ToolCall } from "../types.js";
import { Known, publishAndRead, textOf, toolNames, type AdapterOptions } from "./common.js";

type TransformParams = NonNullable<LanguageModelMiddleware["transformParams"]>;
type CallOptions = Parameters<TransformParams>[0]["params"];
/** The AI SDK's prompt: LanguageModelV4Prompt of @ai-sdk/provider. */
export type Prompt = CallOptions["prompt"];
type PromptMessage = Prompt[number];
type GenerateResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware["wrapGenerate"]>>>;
type StreamResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware["wrapStream"]>>>;
type StreamPart = StreamResult["stream"] extends ReadableStream<infer P> ? P : never;
type UserPart = Extract<PromptMessage, { role: "user" }>["content"][number];
type AssistantPart = Extract<PromptMessage, { role: "assistant" }>["content"][number];
type ToolResultPart = Extract<AssistantPart, { type: "tool-result" }>;
type ToolMessagePart = Extract<PromptMessage, { role: "tool" }>["content"][number];
type Usage = GenerateResult["usage"];

export type CompactorMiddlewareOptions = AdapterOptions;

/**
 * A middleware for wrapLanguageModel that keeps conversation conv in Compactor: the
 * prompt's new messages are published, the model is sent the compacted context (pinned
 * messages, the summary, the recent messages, tool calls and results paired), and its
 * reply is published. One model call at a time per conversation.
 */
export function compactorMiddleware(c: Compactor, conv: string, opts: CompactorMiddlewareOptions = {}): LanguageModelMiddleware {
  const known = new Known(c, conv);
  const generations = new WeakMap<object, number>();
  const publishReply = async (params: CallOptions, reply: Message[]) => {
    if (reply.length === 0) return;
    const gen = generations.get(params);
    const first = reply[0]!;
    if (gen !== undefined && first.usage) first.context_generation = gen;
    await c.publishAll(conv, reply);
    known.add(reply);
  };
  return {
    specificationVersion: "v4",
    async transformParams({ params }) {
      // The call's system messages (instructions) are the application's settings, sent
      // every call: they go first, never published, so never summarized.
      const system = params.prompt.filter((m) => m.role === "system");
      const said = new Set(system.map((m) => m.content));
      const incoming = fromPrompt(params.prompt.filter((m) => m.role !== "system"));
      const cx = await publishAndRead(c, conv, known, incoming, opts);
      const rest = toPrompt(cx).filter((m) => m.role !== "system" || !said.has(m.content));
      const next = { ...params, prompt: [...system, ...rest] };
      generations.set(next, cx.generation);
      return next;
    },
    async wrapGenerate({ doGenerate, params }) {
      const result = await doGenerate();
      await publishReply(params, replyMessages(result.content, result.usage));
      return result;
    },
    async wrapStream({ doStream, params }) {
      const result = await doStream();
      const parts: StreamPart[] = [];
      let usage: Usage | undefined;
      const tap = new TransformStream<StreamPart, StreamPart>({
        transform(part, ctl) {
          if (part.type === "finish") usage = part.usage;
          else parts.push(part);
          ctl.enqueue(part);
        },
        async flush() {
          await publishReply(params, replyMessages(streamContent(parts), usage));
        },
      });
      return { ...result, stream: result.stream.pipeThrough(tap) };
    },
  };
}

/** The content a stream's parts add up to: text, reasoning, tool calls and results. */
function streamContent(parts: StreamPart[]): GenerateResult["content"] {
  const out: GenerateResult["content"] = [];
  const texts = new Map<string, { type: "text" | "reasoning"; text: string }>();
  for (const p of parts) {
    if (p.type === "text-start" || p.type === "reasoning-start") {
      const part = { type: p.type === "text-start" ? ("text" as const) : ("reasoning" as const), text: "" };
      texts.set(`${part.type}:${p.id}`, part);
      out.push(part);
    } else if (p.type === "text-delta" || p.type === "reasoning-delta") {
      const key = `${p.type === "text-delta" ? "text" : "reasoning"}:${p.id}`;
      let part = texts.get(key);
      if (!part) {
        part = { type: p.type === "text-delta" ? "text" : "reasoning", text: "" };
        texts.set(key, part);
        out.push(part);
      }
      part.text += p.delta;
    } else if (p.type === "tool-call" || p.type === "tool-result") {
      out.push(p);
    }
  }
  return out;
}

/** The messages of a reply: one assistant message, then the results of tools the provider ran. */
function replyMessages(content: GenerateResult["content"], usage: Usage | undefined): Message[] {
  const texts: string[] = [];
  const reasoning: string[] = [];
  const calls: ToolCall[] = [];
  const results: Message[] = [];
  for (const p of content) {
    if (p.type === "text") texts.push(p.text);
    else if (p.type === "reasoning") reasoning.push(p.text);
    else if (p.type === "tool-call") calls.push({ id: p.toolCallId, type: "function", function: { name: p.toolName, arguments: p.input } });
    else if (p.type === "tool-result") results.push({ role: "tool", tool_call_id: p.toolCallId, name: p.toolName, content: resultText({ type: "json", value: p.result }) });
  }
  if (texts.length === 0 && calls.length === 0 && reasoning.length === 0) return results;
  const m: Message = { role: "assistant", content: calls.length > 0 && texts.length === 0 ? null : texts.join("") };
  if (calls.length > 0) m.tool_calls = calls;
  if (reasoning.length > 0) m.reasoning = reasoning.join("");
  const input = usage?.inputTokens.total;
  if (typeof input === "number") m.usage = { prompt_tokens: input, completion_tokens: usage?.outputTokens.total ?? 0 };
  return [m, ...results];
}

/** The AI SDK's prompt as chat messages, one per tool result. */
export function fromPrompt(prompt: Prompt): Message[] {
  const out: Message[] = [];
  for (const m of prompt) {
    switch (m.role) {
      case "system":
        out.push({ role: "system", content: m.content });
        break;
      case "user":
        out.push({ role: "user", content: userContent(m.content) });
        break;
      case "assistant": {
        const texts: string[] = [];
        const reasoning: string[] = [];
        const calls: ToolCall[] = [];
        const results: Message[] = [];
        for (const p of m.content) {
          if (p.type === "text") texts.push(p.text);
          else if (p.type === "reasoning") reasoning.push(p.text);
          else if (p.type === "tool-call") calls.push({ id: p.toolCallId, type: "function", function: { name: p.toolName, arguments: JSON.stringify(p.input ?? {}) } });
          else if (p.type === "tool-result") results.push(toolMessage(p));
        }
        const a: Message = { role: "assistant", content: calls.length > 0 && texts.length === 0 ? null : texts.join("") };
        if (calls.length > 0) a.tool_calls = calls;
        if (reasoning.length > 0) a.reasoning = reasoning.join("");
        out.push(a, ...results);
        break;
      }
      case "tool":
        for (const p of m.content) if (p.type === "tool-result") out.push(toolMessage(p));
        break;
    }
  }
  return out;
}

function toolMessage(p: ToolResultPart | Extract<ToolMessagePart, { type: "tool-result" }>): Message {
  return { role: "tool", tool_call_id: p.toolCallId, name: p.toolName, content: resultText(p.output) };
}

/** A tool's output as the text a tool message holds. */
function resultText(o: ToolResultPart["output"]): string {
  switch (o.type) {
    case "text":
    case "error-text":
      return o.value;
    case "json":
    case "error-json":
      return JSON.stringify(o.value ?? null);
    case "execution-denied":
      return o.reason ? `execution denied: ${o.reason}` : "execution denied";
    case "content":
      return o.value.map((v) => (v.type === "text" ? v.text : `[${v.type}${"mediaType" in v ? ` ${v.mediaType}` : ""}]`)).join("\n");
  }
}

/** A user message's parts: a string when all are text, else text and image_url parts. */
function userContent(parts: UserPart[]): string | ContentPart[] {
  if (parts.every((p) => p.type === "text")) return parts.map((p) => (p as { text: string }).text).join("");
  return parts.map((p): ContentPart => {
    if (p.type === "text") return { type: "text", text: p.text };
    const url = fileURL(p);
    if (url && p.mediaType.startsWith("image/")) return { type: "image_url", image_url: { url } };
    return { type: "text", text: `[file ${p.filename ?? ""} ${p.mediaType}]`.replace("  ", " ") };
  });
}

function fileURL(p: Extract<UserPart, { type: "file" }>): string | undefined {
  const d = p.data;
  if (d.type === "url") return d.url.href;
  if (d.type === "data") return `data:${p.mediaType};base64,${typeof d.data === "string" ? d.data : Buffer.from(d.data).toString("base64")}`;
  return undefined;
}

/**
 * A context as the AI SDK's prompt: system, user and assistant messages, an assistant's
 * tool calls as tool-call parts and the results that answer them as one tool message of
 * tool-result parts. The summary keeps the role the reader gives it.
 */
export function toPrompt(cx: Pick<Context, "messages">): Prompt {
  const names = toolNames(cx.messages);
  const out: Prompt = [];
  for (const m of cx.messages) {
    switch (m.role) {
      case "system":
        out.push({ role: "system", content: textOf(m) });
        break;
      case "user":
        out.push({ role: "user", content: userParts(m) });
        break;
      case "assistant": {
        const content: AssistantPart[] = [];
        if (m.reasoning) content.push({ type: "reasoning", text: m.reasoning });
        const text = textOf(m);
        if (text !== "") content.push({ type: "text", text });
        for (const tc of m.tool_calls ?? []) content.push({ type: "tool-call", toolCallId: tc.id, toolName: tc.function.name, input: parseArgs(tc.function.arguments) });
        out.push({ role: "assistant", content });
        break;
      }
      case "tool": {
        const part: ToolMessagePart = {
          type: "tool-result",
          toolCallId: m.tool_call_id ?? "",
          toolName: names.get(m.tool_call_id ?? "") ?? m.name ?? "",
          output: { type: "text", value: textOf(m) },
        };
        const last = out[out.length - 1];
        if (last?.role === "tool") last.content.push(part);
        else out.push({ role: "tool", content: [part] });
        break;
      }
    }
  }
  return out;
}

function userParts(m: Message): Extract<PromptMessage, { role: "user" }>["content"] {
  if (!Array.isArray(m.content)) return [{ type: "text", text: textOf(m) }];
  const out: Extract<PromptMessage, { role: "user" }>["content"] = [];
  for (const p of m.content) {
    if (p.type === "text" && typeof p["text"] === "string") out.push({ type: "text", text: p["text"] });
    else if (p.type === "image_url") {
      const url = (p["image_url"] as { url?: unknown } | undefined)?.url;
      if (typeof url === "string") out.push(imagePart(url));
    }
  }
  return out;
}

function imagePart(url: string): UserPart {
  const data = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  if (data) return { type: "file", mediaType: data[1]!, data: { type: "data", data: data[2]! } };
  return { type: "file", mediaType: "image/*", data: { type: "url", url: new URL(url) } };
}

/** Tool call arguments as the AI SDK's input: the parsed JSON, or the text when it is not JSON. */
function parseArgs(args: string): unknown {
  try {
    return JSON.parse(args === "" ? "{}" : args);
  } catch {
    return args;
  }
}
