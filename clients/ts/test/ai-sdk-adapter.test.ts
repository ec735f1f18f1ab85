// @compactor/client/ai-sdk against the AI SDK's own MockLanguageModelV4 and a running
// Compactor (NATS_URL) with the fake summarizer LLM.

import assert from "node:assert/strict";
import { test } from "node:test";
import { generateText, stepCountIs, streamText, tool, wrapLanguageModel } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { compactorMiddleware, fromPrompt, toPrompt, type Prompt } from "../src/adapters/ai-sdk.js";
import { turn } from "../examples/ai-sdk.js";
import { Known } from "../src/adapters/common.js";
import { SUMMARY_PREFIX, type Compactor, type Message } from "../src/index.js";
import { FACT, TURNS, adapterConversation, checkCompactedAndFact, checkRequests, checkStoredOnce, lookup, userText } from "./adapters.js";

type Generate = ConstructorParameters<typeof MockLanguageModelV4>[0] extends infer O ? (O extends { doGenerate?: infer G } ? Extract<G, (...a: never[]) => unknown> : never) : never;
type GenerateResult = Awaited<ReturnType<Generate>>;

const usage = (input: number): GenerateResult["usage"] => ({
  inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
});

/** The scripted model: a user message asks for the lookup tool, its result gets an answer. */
function scripted(prompt: Prompt, turn: number): GenerateResult {
  const last = prompt[prompt.length - 1]!;
  const input = Math.ceil(JSON.stringify(prompt).length / 4);
  if (last.role === "tool") {
    return { content: [{ type: "text", text: `Item ${turn} costs ${turn * 3} euros.` }], finishReason: { unified: "stop", raw: "stop" }, usage: usage(input), warnings: [] };
  }
  return {
    content: [{ type: "tool-call", toolCallId: `call-${turn}`, toolName: "lookup", input: JSON.stringify({ item: turn }) }],
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage: usage(input),
    warnings: [],
  };
}

const tools = {
  lookup: tool({
    description: "Looks an item up.",
    inputSchema: z.object({ item: z.number() }),
    execute: async ({ item }: { item: number }) => lookup(item),
  }),
};

test("100 turns with tool calls: every request within the window, pairs whole, the first turn's fact kept", async (t) => {
  const { c, conv } = await adapterConversation(t, "ai-sdk-loop");
  const prompts: Prompt[] = [];
  let current = 0;
  const mock = new MockLanguageModelV4({
    doGenerate: async (options) => {
      prompts.push(options.prompt);
      return scripted(options.prompt, current);
    },
  });
  let model = wrapLanguageModel({ model: mock, middleware: compactorMiddleware(c, conv, { waitPendingMs: 10_000 }) });
  // The application keeps its history as generateText hands it back (each turn's last step); the model is sent the compacted context.
  const history: Parameters<typeof generateText>[0]["messages"] & object = [];
  for (let i = 0; i < TURNS; i++) {
    current = i;
    // Half way, a new process takes the conversation over with the same history: nothing is stored twice.
    if (i === TURNS / 2) model = wrapLanguageModel({ model: mock, middleware: compactorMiddleware(c, conv, { waitPendingMs: 10_000 }) });
    history.push({ role: "user", content: userText(i) });
    const r = await generateText({ model, instructions: "You are a shop assistant.", messages: history, tools, stopWhen: stepCountIs(4) });
    assert.equal(r.text, `Item ${i} costs ${i * 3} euros.`);
    history.push(...r.response.messages);
  }
  const requests = prompts.map(fromPrompt);
  const most = checkRequests(requests);
  t.diagnostic(`largest request ${most} tokens; whole history ${history.length} messages: ${history.slice(0, 6).map((m) => m.role).join(",")}`);
  for (const [i, p] of prompts.entries()) {
    // Pairs in the AI SDK's own types: a tool message's results answer the calls of the assistant before it.
    p.forEach((m, j) => {
      if (m.role !== "tool") return;
      const prev = p[j - 1];
      assert.equal(prev?.role, "assistant", `request ${i} message ${j}: tool results after ${prev?.role}`);
      const calls = (prev!.content as Array<{ type: string; toolCallId?: string }>).filter((x) => x.type === "tool-call").map((x) => x.toolCallId);
      assert.deepStrictEqual(m.content.map((x) => (x as { toolCallId: string }).toolCallId), calls, `request ${i} message ${j}`);
    });
  }
  const last = prompts[prompts.length - 1]!;
  await checkCompactedAndFact(c, conv, fromPrompt(last));
  assert.equal(last[0]!.role, "system", "the instructions stay first");
  const summary = last.find((m) => JSON.stringify(m.content).includes(JSON.stringify(SUMMARY_PREFIX).slice(1, 40)));
  assert.ok(summary, "the last request holds the summary");
  assert.equal(summary.role, "user", "the summary keeps the reader's role (summary_role user)");
  await checkStoredOnce(c, conv, (i) => `Item ${i} costs ${i * 3} euros.`);
});

test("a stream's reply is published with its tool calls", async (t) => {
  const { c, conv } = await adapterConversation(t, "ai-sdk-stream");
  const mock = new MockLanguageModelV4({
    doStream: async ({ prompt }) => {
      const r = scripted(prompt, 0);
      const parts: unknown[] = [{ type: "stream-start", warnings: [] }];
      for (const p of r.content) {
        if (p.type === "text") parts.push({ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: p.text.slice(0, 4) }, { type: "text-delta", id: "t", delta: p.text.slice(4) }, { type: "text-end", id: "t" });
        else parts.push(p);
      }
      parts.push({ type: "finish", finishReason: r.finishReason, usage: r.usage });
      return { stream: new ReadableStream({ start: (ctl) => { for (const p of parts) ctl.enqueue(p); ctl.close(); } }) as never };
    },
  });
  const model = wrapLanguageModel({ model: mock, middleware: compactorMiddleware(c, conv) });
  const r = streamText({ model, prompt: userText(0), tools, stopWhen: stepCountIs(4) });
  assert.equal(await r.text, "Item 0 costs 0 euros.");
  const cx = await c.context(conv);
  assert.deepStrictEqual(
    cx.messages.map((m) => [m.role, m.tool_calls?.[0]?.function.name ?? m.tool_call_id ?? m.content]),
    [
      ["user", userText(0)],
      ["assistant", "lookup"],
      ["tool", "call-0"],
      ["assistant", "Item 0 costs 0 euros."],
    ],
  );
  assert.equal(cx.messages[1]!.tool_calls![0]!.function.arguments, '{"item":0}');
  assert.ok((cx.messages[2]!.content as string).includes(lookup(0)), String(cx.messages[2]!.content));
  assert.ok(JSON.stringify(cx.messages).includes(FACT));
});

test("toPrompt: tool results of one call grouped, names from the call, the summary's role kept", () => {
  const msgs: Message[] = [
    { role: "system", content: "sys" },
    { role: "user", content: `${SUMMARY_PREFIX}earlier` },
    { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: '{"x":1}' } }, { id: "b", type: "function", function: { name: "g", arguments: "" } }] },
    { role: "tool", tool_call_id: "a", content: "1" },
    { role: "tool", tool_call_id: "b", content: "2" },
    { role: "assistant", content: "done" },
  ];
  assert.deepStrictEqual(toPrompt({ messages: msgs }), [
    { role: "system", content: "sys" },
    { role: "user", content: [{ type: "text", text: `${SUMMARY_PREFIX}earlier` }] },
    { role: "assistant", content: [{ type: "tool-call", toolCallId: "a", toolName: "f", input: { x: 1 } }, { type: "tool-call", toolCallId: "b", toolName: "g", input: {} }] },
    { role: "tool", content: [{ type: "tool-result", toolCallId: "a", toolName: "f", output: { type: "text", value: "1" } }, { type: "tool-result", toolCallId: "b", toolName: "g", output: { type: "text", value: "2" } }] },
    { role: "assistant", content: [{ type: "text", text: "done" }] },
  ]);
  const back = fromPrompt(toPrompt({ messages: msgs }));
  assert.deepStrictEqual(back.map((m) => [m.role, m.tool_call_id ?? m.tool_calls?.length ?? m.content]), [
    ["system", "sys"],
    ["user", `${SUMMARY_PREFIX}earlier`],
    ["assistant", 2],
    ["tool", "a"],
    ["tool", "b"],
    ["assistant", "done"],
  ]);
});

test("the example's turn: only the new message handed over, the model recalls what the summary left out", async (t) => {
  const { c, conv } = await adapterConversation(t, "ai-sdk-example");
  const history: Message[] = [];
  for (let i = 0; i < 12; i++) history.push({ role: "user", content: `step ${i} NEEDLE-aiex${i} ${"background ".repeat(30)}` }, { role: "assistant", content: `ok ${i}` });
  await c.publishAll(conv, history);
  await c.policy.set(conv, { keep_last_n: 2 });
  assert.equal((await c.compact(conv, { waitMs: 30_000 })).status, "completed");
  const prompts: Prompt[] = [];
  const mock = new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      prompts.push(prompt);
      if (prompts.length === 1) {
        return { content: [{ type: "tool-call", toolCallId: "r-1", toolName: "recall", input: '{"query":"step 3 needle-aiex3 "}' }], finishReason: { unified: "tool-calls", raw: undefined }, usage: usage(Math.ceil(JSON.stringify(prompt).length / 4)), warnings: [] };
      }
      return { content: [{ type: "text", text: "step 3 it was" }], finishReason: { unified: "stop", raw: undefined }, usage: usage(Math.ceil(JSON.stringify(prompt).length / 4)), warnings: [] };
    },
  });
  assert.equal(await turn(c, conv, mock, "what was step 3?"), "step 3 it was");
  const first = fromPrompt(prompts[0]!);
  assert.ok(textOfAll(first).startsWith("You are a helpful assistant."), "the instructions first");
  assert.ok(first.some((m) => typeof m.content === "string" && m.content.startsWith(SUMMARY_PREFIX)), "then the summary");
  assert.ok(!textOfAll(first).includes("step 3 NEEDLE-aiex3"), "step 3 is summarized away");
  const sent = fromPrompt(prompts[1]!);
  const result = sent[sent.length - 1]!;
  assert.equal(result.role, "tool");
  assert.match(result.content as string, /step 3 NEEDLE-aiex3/);
  // The turn is stored: the question, the recall round, the answer.
  const cx = await c.context(conv);
  assert.deepStrictEqual(cx.messages.slice(-4).map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  assert.equal(cx.messages.filter((m) => m.role === "system").length, 0, "the instructions are not stored");
});

function textOfAll(ms: Message[]): string {
  return ms.map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content))).join("\n");
}

test("Known.fresh: the new messages of a whole history, of only the new ones, of a repeated user message, of a history that left the newest out", () => {
  const u = (content: string): Message => ({ role: "user", content });
  const a = (content: string): Message => ({ role: "assistant", content });
  const call: Message = { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: '{"x": 1}' } }] };
  const result: Message = { role: "tool", tool_call_id: "c1", content: "r" };
  const known = new Known(undefined as unknown as Compactor, "conv");
  known.add([{ role: "system", content: "sys" }, u("yes"), call, result, a("done")]);
  const cases: Array<[string, Message[], Message[]]> = [
    ["the whole history and a new message", [{ role: "system", content: "sys" }, u("yes"), call, result, a("done"), u("next")], [u("next")]],
    ["only the new message", [u("next")], [u("next")]],
    ["a user saying again what they said", [u("yes")], [u("yes")]],
    ["the call's arguments as other JSON text", [u("yes"), { ...call, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: '{"x":1}' } }] }, result, a("done"), u("more")], [u("more")]],
    ["a history without the newest message", [u("yes"), call, result, u("again")], [u("again")]],
    ["a new system message", [{ role: "system", content: "other" }, u("next")], [{ role: "system", content: "other" }, u("next")]],
  ];
  for (const [name, incoming, want] of cases) assert.deepStrictEqual(known.fresh(incoming), want, name);
});
