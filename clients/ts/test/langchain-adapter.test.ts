// @compactor/client/langchain with @langchain/core's own fake chat model (FakeChatModel,
// given a script of tool calls) and tools, through the example's loop and a running
// Compactor (NATS_URL) with the fake summarizer LLM.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { ChatResult } from "@langchain/core/outputs";
import { AIMessage, HumanMessage, SystemMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { FakeChatModel } from "@langchain/core/utils/testing";
import { z } from "zod";
import { recallTool, turn } from "../examples/langchain.js";
import { CompactorChatMessageHistory, fromLangChain, toLangChain } from "../src/adapters/langchain.js";
import { SUMMARY_PREFIX, type Message } from "../src/index.js";
import { FACT, TURNS, adapterConversation, checkCompactedAndFact, checkRequests, checkStoredOnce, lookup, userText } from "./adapters.js";

/** FakeChatModel answering from a script: each call's messages in, the next reply out. */
class ScriptedChatModel extends FakeChatModel {
  readonly requests: BaseMessage[][] = [];

  constructor(private readonly reply: (messages: BaseMessage[]) => AIMessage) {
    super({});
  }

  override async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    this.requests.push([...messages]);
    const message = this.reply(messages);
    return { generations: [{ message, text: typeof message.content === "string" ? message.content : "" }] };
  }
}

const lookupTool = tool(async ({ item }: { item: number }) => lookup(item), {
  name: "lookup",
  description: "Looks an item up.",
  schema: z.object({ item: z.number() }),
});

test("100 turns with tool calls on a CompactorChatMessageHistory: every request within the window, pairs whole, the first turn's fact kept", async (t) => {
  const { c, conv } = await adapterConversation(t, "langchain-loop");
  let current = 0;
  const model = new ScriptedChatModel((messages) => {
    if (ToolMessage.isInstance(messages[messages.length - 1])) return new AIMessage(`Item ${current} costs ${current * 3} euros.`);
    return new AIMessage({ content: "", tool_calls: [{ id: `call-${current}`, name: "lookup", args: { item: current }, type: "tool_call" }] });
  });
  let history = new CompactorChatMessageHistory(c, conv, { waitPendingMs: 10_000 });
  await history.addMessage(new SystemMessage("You are a shop assistant."));
  for (let i = 0; i < TURNS; i++) {
    current = i;
    // Half way, a new process takes the conversation over: a new history on the same id.
    if (i === TURNS / 2) history = new CompactorChatMessageHistory(c, conv, { waitPendingMs: 10_000 });
    assert.equal(await turn(history, model, [lookupTool], userText(i)), `Item ${i} costs ${i * 3} euros.`);
  }
  const most = checkRequests(model.requests.map((r) => r.map(fromLangChain)));
  t.diagnostic(`largest request ${most} tokens over ${model.requests.length} requests`);
  // Pairs in LangChain's own types: every ToolMessage answers a tool call of the AIMessage before its run of results.
  for (const [i, msgs] of model.requests.entries()) {
    let open = new Set<string>();
    for (const m of msgs) {
      if (ToolMessage.isInstance(m)) assert.ok(open.delete(m.tool_call_id), `request ${i}: ToolMessage ${m.tool_call_id} without its call`);
      else {
        assert.equal(open.size, 0, `request ${i}: calls ${[...open]} without results`);
        open = new Set(AIMessage.isInstance(m) ? (m.tool_calls ?? []).map((tc) => tc.id!) : []);
      }
    }
  }
  const last = model.requests[model.requests.length - 1]!;
  assert.ok(SystemMessage.isInstance(last[0]) && last[0].content === "You are a shop assistant.", "the system prompt stays first (pinned)");
  const summary = last.find((m) => typeof m.content === "string" && m.content.startsWith(SUMMARY_PREFIX.slice(0, 20)));
  assert.ok(summary && HumanMessage.isInstance(summary), "the summary, a HumanMessage (the reader's role user)");
  await checkCompactedAndFact(c, conv, last.map(fromLangChain));
  await checkStoredOnce(c, conv, (i) => `Item ${i} costs ${i * 3} euros.`);
});

test("clear forgets the conversation", async (t) => {
  const { c, conv } = await adapterConversation(t, "langchain-clear");
  const history = new CompactorChatMessageHistory(c, conv);
  await history.addUserMessage(`hello ${FACT}`);
  await history.addAIMessage("hi");
  assert.deepStrictEqual((await history.getMessages()).map((m) => [m.type, m.content]), [["human", `hello ${FACT}`], ["ai", "hi"]]);
  await history.clear();
  assert.deepStrictEqual(await history.getMessages(), []);
  await history.addUserMessage("again");
  assert.deepStrictEqual((await history.getMessages()).map((m) => [m.type, m.content]), [["human", "again"]]);
});

test("the example's turn: the model recalls what the summary left out", async (t) => {
  const { c, conv } = await adapterConversation(t, "langchain-example");
  const old: Message[] = [];
  for (let i = 0; i < 12; i++) old.push({ role: "user", content: `step ${i} NEEDLE-lcex${i} ${"background ".repeat(30)}` }, { role: "assistant", content: `ok ${i}` });
  await c.publishAll(conv, old);
  await c.policy.set(conv, { keep_last_n: 2 });
  assert.equal((await c.compact(conv, { waitMs: 30_000 })).status, "completed");
  const model = new ScriptedChatModel((messages) =>
    ToolMessage.isInstance(messages[messages.length - 1])
      ? new AIMessage("step 3 it was")
      : new AIMessage({ content: "", tool_calls: [{ id: "r-1", name: "recall", args: { query: "step 3 needle-lcex3 " }, type: "tool_call" }] }),
  );
  const history = new CompactorChatMessageHistory(c, conv);
  assert.equal(await turn(history, model, [recallTool(c, conv)], "what was step 3?"), "step 3 it was");
  const first = model.requests[0]!;
  assert.ok(first.some((m) => typeof m.content === "string" && m.content.startsWith(SUMMARY_PREFIX.slice(0, 20))), "the summary");
  assert.ok(!JSON.stringify(first.map(fromLangChain)).includes("step 3 NEEDLE-lcex3"), "step 3 is summarized away");
  const result = model.requests[1]![model.requests[1]!.length - 1]!;
  assert.ok(ToolMessage.isInstance(result));
  assert.match(String(result.content), /step 3 NEEDLE-lcex3/);
});

test("fromLangChain and toLangChain: tool calls with their args, results with their call's id and name", () => {
  const msgs: BaseMessage[] = [
    new SystemMessage("sys"),
    new HumanMessage(`${SUMMARY_PREFIX}earlier`),
    new AIMessage({ content: "", tool_calls: [{ id: "a", name: "f", args: { x: 1 }, type: "tool_call" }, { id: "b", name: "g", args: {}, type: "tool_call" }], usage_metadata: { input_tokens: 120, output_tokens: 7, total_tokens: 127 } }),
    new ToolMessage({ content: "1", tool_call_id: "a" }),
    new ToolMessage({ content: [{ type: "text", text: "2" }], tool_call_id: "b", name: "g" }),
    new AIMessage("done"),
  ];
  const chat = msgs.map(fromLangChain);
  assert.deepStrictEqual(chat, [
    { role: "system", content: "sys" },
    { role: "user", content: `${SUMMARY_PREFIX}earlier` },
    { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: '{"x":1}' } }, { id: "b", type: "function", function: { name: "g", arguments: "{}" } }], usage: { prompt_tokens: 120, completion_tokens: 7 } },
    { role: "tool", tool_call_id: "a", content: "1" },
    { role: "tool", tool_call_id: "b", name: "g", content: "2" },
    { role: "assistant", content: "done" },
  ] satisfies Message[]);
  const back = toLangChain({ messages: chat });
  assert.deepStrictEqual(back.map((m) => m.type), ["system", "human", "ai", "tool", "tool", "ai"]);
  const ai = back[2] as AIMessage;
  assert.deepStrictEqual(ai.tool_calls, [{ id: "a", name: "f", args: { x: 1 }, type: "tool_call" }, { id: "b", name: "g", args: {}, type: "tool_call" }]);
  const results = back.slice(3, 5) as ToolMessage[];
  assert.deepStrictEqual(results.map((m) => [m.tool_call_id, m.name, m.content]), [["a", "f", "1"], ["b", "g", "2"]]);
});
