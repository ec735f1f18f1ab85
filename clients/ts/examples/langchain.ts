// A LangChain.js agent loop on Compactor: the chat history is a
// CompactorChatMessageHistory, so every message (the user's, the model's with its tool
// calls, each tool's result) is published to Compactor and the model is sent the
// compacted context (pinned messages, the summary, the recent messages). The model may
// call recall for raw messages the summary left out.
//
//   npm run build && npm install --no-save @langchain/openai
//   OPENAI_API_KEY=sk-... MODEL=gpt-4o-mini \
//     node dist/examples/langchain.js my-conversation      (one user message per line on stdin)
//
// Any LangChain chat model that calls tools works in place of ChatOpenAI. NATS_URL (and
// NATS_USER, ...) say where Compactor is.

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import type { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, HumanMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { Runnable } from "@langchain/core/runnables";
import { tool, type StructuredToolInterface } from "@langchain/core/tools";
import { CompactorChatMessageHistory } from "../src/adapters/langchain.js";
import { Compactor, connectOptionsFromEnv, RECALL_TOOL } from "../src/index.js";

/** A chat model, with tools bound where it calls them. */
export type ChatModel = Runnable<BaseMessage[], AIMessage>;

/** The recall tool of conversation conv, answered by Compactor. */
export function recallTool(c: Compactor, conv: string): StructuredToolInterface {
  return tool(async (args: Record<string, unknown>) => c.answerRecall(conv, JSON.stringify(args)), {
    name: RECALL_TOOL.function.name,
    description: RECALL_TOOL.function.description,
    schema: RECALL_TOOL.function.parameters as unknown as Record<string, unknown>,
  });
}

/**
 * One turn: the user's text in, the model's final answer out. Each step sends the model
 * the history's messages (the compacted context) and stores what it answers and what
 * the tools it called return, until it answers without a tool call (at most 8 steps).
 */
export async function turn(history: CompactorChatMessageHistory, model: ChatModel, tools: StructuredToolInterface[], userText: string): Promise<string> {
  await history.addMessage(new HumanMessage(userText));
  const byName = new Map(tools.map((t) => [t.name, t]));
  for (let step = 0; step < 8; step++) {
    const reply = await model.invoke(await history.getMessages());
    await history.addMessage(reply);
    if (!reply.tool_calls?.length) return typeof reply.content === "string" ? reply.content : reply.text;
    const results: BaseMessage[] = [];
    for (const tc of reply.tool_calls) {
      const t = byName.get(tc.name);
      if (!t) {
        results.push(new ToolMessage({ content: `error: there is no tool named ${tc.name}`, tool_call_id: tc.id ?? "", name: tc.name }));
        continue;
      }
      try {
        results.push((await t.invoke({ ...tc, type: "tool_call" })) as ToolMessage);
      } catch (e) {
        results.push(new ToolMessage({ content: `error: ${(e as Error).message}`, tool_call_id: tc.id ?? "", name: tc.name })); // the model sees it and may recover
      }
    }
    await history.addMessages(results);
  }
  throw new Error("the model was still calling tools after 8 steps");
}

async function main(): Promise<void> {
  const conv = process.argv[2];
  if (!conv) {
    console.error("usage: node dist/examples/langchain.js <conversation>   (one user message per line on stdin)");
    process.exit(2);
  }
  const c = await Compactor.connect(connectOptionsFromEnv());
  // @langchain/openai is not a dependency of the client: install it to run this example.
  const provider = "@langchain/openai";
  const { ChatOpenAI } = (await import(provider)) as { ChatOpenAI: new (o: { model: string }) => BaseChatModel };
  const tools = [recallTool(c, conv)];
  const model = new ChatOpenAI({ model: process.env["MODEL"] || "gpt-4o-mini" }).bindTools!(tools) as ChatModel;
  const history = new CompactorChatMessageHistory(c, conv, { waitPendingMs: 5000 });
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (line.trim()) console.log(await turn(history, model, tools, line));
    }
  } finally {
    await c.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.message : e);
    process.exitCode = 1;
  });
}
