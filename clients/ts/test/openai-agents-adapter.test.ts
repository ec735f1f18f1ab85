// @compactor/client/openai-agents with the Agents SDK's own runner, a Model of the test's
// that returns scripted tool calls, and a running Compactor (NATS_URL) with the fake
// summarizer LLM.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Agent, run, setTracingDisabled, tool, Usage, type AgentInputItem, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";
import { turn } from "../examples/openai-agents.js";
import { CompactorSession, fromItems, toItems } from "../src/adapters/openai-agents.js";
import { CompactorError, SUMMARY_PREFIX, type Message } from "../src/index.js";
import { FACT, TURNS, adapterConversation, checkCompactedAndFact, checkRequests, checkStoredOnce, lookup, userText } from "./adapters.js";

setTracingDisabled(true);

/** A model that asks for the lookup tool on a user's message and answers its result. */
class ScriptedModel implements Model {
  readonly requests: AgentInputItem[][] = [];
  turn = 0;

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = typeof request.input === "string" ? [{ role: "user" as const, content: request.input }] : request.input;
    this.requests.push(structuredClone(input));
    const last = input[input.length - 1]!;
    const usage = new Usage({ requests: 1, inputTokens: Math.ceil(JSON.stringify(input).length / 4), outputTokens: 5, totalTokens: 0 });
    if (last.type === "function_call_result") {
      return { usage, output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: `Item ${this.turn} costs ${this.turn * 3} euros.` }] }] };
    }
    return { usage, output: [{ type: "function_call", callId: `call-${this.turn}`, name: "lookup", arguments: JSON.stringify({ item: this.turn }), status: "completed" }] };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the scripted model does not stream");
  }
}

const lookupTool = tool({
  name: "lookup",
  description: "Looks an item up.",
  parameters: z.object({ item: z.number() }),
  execute: async ({ item }) => lookup(item),
});

test("100 runs with tool calls on a CompactorSession: every request within the window, pairs whole, the first turn's fact kept", async (t) => {
  const { c, conv } = await adapterConversation(t, "agents-loop");
  const model = new ScriptedModel();
  const agent = new Agent({ name: "shop", instructions: "You are a shop assistant.", model, tools: [lookupTool] });
  let session = new CompactorSession(c, conv, { waitPendingMs: 10_000 });
  assert.equal(await session.getSessionId(), conv);
  for (let i = 0; i < TURNS; i++) {
    model.turn = i;
    // Half way, a new process takes the conversation over: a new session on the same id.
    if (i === TURNS / 2) session = new CompactorSession(c, conv, { waitPendingMs: 10_000 });
    const r = await run(agent, userText(i), { session });
    assert.equal(r.finalOutput, `Item ${i} costs ${i * 3} euros.`);
  }
  const most = checkRequests(model.requests.map(fromItems));
  t.diagnostic(`largest request ${most} tokens over ${model.requests.length} requests`);
  // Pairs in the SDK's own types: every function_call_result follows the calls of its response.
  for (const [i, items] of model.requests.entries()) {
    const open = new Set<string>();
    for (const it of items) {
      if (it.type === "function_call") open.add(it.callId);
      else if (it.type === "function_call_result") assert.ok(open.delete(it.callId), `request ${i}: a result for ${it.callId} without its call`);
    }
    assert.equal(open.size, 0, `request ${i}: calls ${[...open]} without results`);
  }
  const last = model.requests[model.requests.length - 1]!;
  await checkCompactedAndFact(c, conv, fromItems(last));
  const summary = last.find((it) => "role" in it && JSON.stringify(it.content).includes(SUMMARY_PREFIX.slice(0, 20)));
  assert.ok(summary && "role" in summary && summary.role === "user", "the summary, in the reader's role (user)");
  await checkStoredOnce(c, conv, (i) => `Item ${i} costs ${i * 3} euros.`);
  // getItems with a limit: the newest items, never a result without its call.
  for (const n of [1, 2, 3, 5]) {
    const items = await session.getItems(n);
    assert.ok(items.length <= n);
    assert.notEqual(items[0]?.type, "function_call_result", `getItems(${n}) starts with a result`);
  }
});

test("popItem is refused, clearSession forgets the conversation", async (t) => {
  const { c, conv } = await adapterConversation(t, "agents-clear");
  const session = new CompactorSession(c, conv);
  await session.addItems([{ role: "user", content: `hello ${FACT}` }]);
  assert.deepStrictEqual(await session.getItems(), [{ role: "user", content: `hello ${FACT}` }]);
  await assert.rejects(session.popItem(), (e: Error) => e instanceof CompactorError && /append-only/.test(e.message));
  await session.clearSession();
  assert.deepStrictEqual(await session.getItems(), []);
  await session.addItems([{ role: "user", content: "again" }]);
  assert.deepStrictEqual(await session.getItems(), [{ role: "user", content: "again" }]);
});

test("fromItems and toItems: calls join their assistant message, results pair, other items kept whole", () => {
  const items: AgentInputItem[] = [
    { role: "system", content: "sys" },
    { role: "user", content: [{ type: "input_text", text: "hi" }] },
    { type: "reasoning", content: [{ type: "input_text", text: "think" }] },
    { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "calling" }] },
    { type: "function_call", callId: "a", name: "f", arguments: '{"x":1}', status: "completed" },
    { type: "function_call", callId: "b", name: "g", arguments: "{}", status: "completed" },
    { type: "function_call_result", callId: "a", name: "f", status: "completed", output: "1" },
    { type: "function_call_result", callId: "b", name: "g", status: "completed", output: { type: "text", text: "2" } },
    { type: "hosted_tool_call", name: "web_search", status: "completed", output: "found" },
  ];
  const msgs = fromItems(items);
  assert.deepStrictEqual(msgs.slice(0, 5), [
    { role: "system", content: "sys" },
    { role: "user", content: "hi" },
    { role: "assistant", content: "calling", reasoning: "think", tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: '{"x":1}' } }, { id: "b", type: "function", function: { name: "g", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "a", name: "f", content: "1" },
    { role: "tool", tool_call_id: "b", name: "g", content: "2" },
  ] satisfies Message[]);
  const summary: Message = { role: "user", content: `${SUMMARY_PREFIX}earlier` };
  const back = toItems({ messages: [summary, ...msgs] });
  assert.deepStrictEqual(back, [
    { role: "user", content: `${SUMMARY_PREFIX}earlier` },
    { role: "system", content: "sys" },
    { role: "user", content: "hi" },
    { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "calling" }] },
    { type: "function_call", callId: "a", name: "f", arguments: '{"x":1}', status: "completed" },
    { type: "function_call", callId: "b", name: "g", arguments: "{}", status: "completed" },
    { type: "function_call_result", callId: "a", name: "f", status: "completed", output: { type: "text", text: "1" } },
    { type: "function_call_result", callId: "b", name: "g", status: "completed", output: { type: "text", text: "2" } },
    items[8],
  ]);
});

test("the example's turn: the run starts from the summary, the agent recalls what it left out", async (t) => {
  const { c, conv } = await adapterConversation(t, "agents-example");
  const history: Message[] = [];
  for (let i = 0; i < 12; i++) history.push({ role: "user", content: `step ${i} NEEDLE-agex${i} ${"background ".repeat(30)}` }, { role: "assistant", content: `ok ${i}` });
  await c.publishAll(conv, history);
  await c.policy.set(conv, { keep_last_n: 2 });
  assert.equal((await c.compact(conv, { waitMs: 30_000 })).status, "completed");
  const requests: ModelRequest[] = [];
  const model: Model = {
    async getResponse(request) {
      requests.push(structuredClone(request));
      const usage = new Usage({ requests: 1, inputTokens: 100, outputTokens: 5, totalTokens: 105 });
      if (requests.length === 1) return { usage, output: [{ type: "function_call", callId: "r-1", name: "recall", arguments: '{"query":"step 3 needle-agex3 "}', status: "completed" }] };
      return { usage, output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "step 3 it was" }] }] };
    },
    async *getStreamedResponse() {
      throw new Error("the scripted model does not stream");
    },
  };
  assert.equal(await turn(c, conv, model, "what was step 3?"), "step 3 it was");
  const first = requests[0]!.input as AgentInputItem[];
  assert.match(requests[0]!.systemInstructions ?? "", /call recall/);
  assert.ok(JSON.stringify(first).includes(SUMMARY_PREFIX.slice(0, 20)), "the run starts from the summary");
  assert.ok(!JSON.stringify(first).includes("step 3 NEEDLE-agex3"), "step 3 is summarized away");
  const second = requests[1]!.input as AgentInputItem[];
  const result = second[second.length - 1]!;
  assert.equal(result.type, "function_call_result");
  assert.match(JSON.stringify(result), /step 3 NEEDLE-agex3/);
  const cx = await c.context(conv);
  assert.deepStrictEqual(cx.messages.slice(-4).map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
});
