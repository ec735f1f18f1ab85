// The example agent loop (examples/agent.ts) against a fake OpenAI-compatible endpoint
// and a running Compactor (NATS_URL).

import assert from "node:assert/strict";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { test, type TestContext } from "node:test";
import { exampleTools, recallTool, runTurn } from "../examples/agent.js";
import { Compactor, RECALL_TOOL, SUMMARY_PREFIX, type Message } from "../src/index.js";
import { convId, need } from "./env.js";

interface Seen {
  auth: string | undefined;
  body: { model: string; messages: Message[]; tools?: unknown[] };
}

/** A chat completions endpoint that answers with the scripted replies, in order. */
async function fakeLLM(t: TestContext, replies: Array<Record<string, unknown> | number>): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const srv = createServer(async (req: IncomingMessage, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    if (req.url !== "/v1/chat/completions" || req.method !== "POST") {
      res.writeHead(404).end();
      return;
    }
    seen.push({ auth: req.headers.authorization, body: JSON.parse(body) });
    const reply = replies[seen.length - 1] ?? { content: "out of script" };
    if (typeof reply === "number") {
      res.writeHead(reply, { "content-type": "application/json" }).end(`{"error":{"message":"fake failure"}}`);
      return;
    }
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({
        id: "c1",
        object: "chat.completion",
        choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", ...reply } }],
        usage: { prompt_tokens: 100 + seen.length, completion_tokens: 7 },
      }),
    );
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => srv.close(() => r())));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, seen };
}

async function compactor(t: TestContext): Promise<Compactor> {
  const url = need("NATS_URL");
  const c = await Compactor.connect({ servers: url });
  t.after(() => c.close());
  return c;
}

test("a turn with a tool call: every message is published, the model is sent the context", async (t) => {
  const c = await compactor(t);
  const llm = await fakeLLM(t, [
    { content: null, tool_calls: [{ id: "call-1", type: "function", function: { name: "count_words", arguments: '{"text":"one two three"}' } }] },
    { content: null, tool_calls: [{ id: "call-2", type: "function", function: { name: "no_such_tool", arguments: "{}" } }] },
    { content: "The text has 3 words." },
  ]);
  const conv = convId("ts-agent");
  const answer = await runTurn(c, conv, "How many words in 'one two three'?", { baseUrl: llm.url, apiKey: "test-key", model: "fake", tools: exampleTools });
  assert.equal(answer, "The text has 3 words.");
  assert.equal(llm.seen.length, 3);
  assert.equal(llm.seen[0]!.auth, "Bearer test-key");
  assert.equal(llm.seen[0]!.body.tools?.length, 2);
  assert.deepStrictEqual(llm.seen[0]!.body.messages, [{ role: "user", content: "How many words in 'one two three'?" }]);
  const cx = await c.context(conv, { format: "raw" });
  // What the model was sent last is the conversation as published, metadata stripped.
  assert.deepStrictEqual(
    llm.seen[2]!.body.messages,
    cx.messages.slice(0, -1).map(({ usage: _u, context_generation: _g, ...m }) => m),
  );
  assert.deepStrictEqual(
    cx.messages.map((m) => [m.role, m.tool_call_id ?? m.tool_calls?.[0]?.function.name ?? m.content]),
    [
      ["user", "How many words in 'one two three'?"],
      ["assistant", "count_words"],
      ["tool", "call-1"],
      ["assistant", "no_such_tool"],
      ["tool", "call-2"],
      ["assistant", "The text has 3 words."],
    ],
  );
  assert.equal(cx.messages[2]!.content, "3");
  assert.match(cx.messages[4]!.content as string, /no tool named no_such_tool/);
  assert.deepStrictEqual([cx.messages[5]!.usage, cx.messages[5]!.context_generation], [{ prompt_tokens: 103, completion_tokens: 7 }, 0]);
});

test("the model is sent the compacted context", async (t) => {
  const c = await compactor(t);
  const conv = convId("ts-agent-compacted");
  const history: Message[] = [{ role: "system", content: "You are an agent." }];
  for (let i = 0; i < 20; i++) {
    history.push({ role: "user", content: `step ${i} NEEDLE-agent${i} ${"background ".repeat(30)}` }, { role: "assistant", content: `ok ${i}` });
  }
  await c.publishAll(conv, history);
  await c.policy.set(conv, { keep_last_n: 4 });
  const r = await c.compact(conv, { waitMs: 30_000 });
  assert.equal(r.status, "completed", JSON.stringify(r));
  const llm = await fakeLLM(t, [{ content: "noted" }]);
  assert.equal(await runTurn(c, conv, "what next?", { baseUrl: llm.url, model: "fake" }), "noted");
  const sent = llm.seen[0]!.body.messages;
  assert.equal(sent[0]!.content, "You are an agent.", "the system prompt is pinned");
  assert.ok((sent[1]!.content as string).startsWith(SUMMARY_PREFIX), "then the summary");
  assert.match(sent[1]!.content as string, /NEEDLE-agent0/);
  assert.deepStrictEqual(sent.slice(-1), [{ role: "user", content: "what next?" }]);
  assert.equal(sent.length, 2 + 4 + 1);
  assert.equal(llm.seen[0]!.auth, undefined, "no key, no authorization header");
});

test("the model recalls a raw message the summary left out", async (t) => {
  const c = await compactor(t);
  const conv = convId("ts-agent-recall");
  const history: Message[] = [{ role: "system", content: "You are an agent." }];
  for (let i = 0; i < 12; i++) {
    history.push({ role: "user", content: `step ${i} NEEDLE-recall${i} ${"background ".repeat(30)}` }, { role: "assistant", content: `ok ${i}` });
  }
  const acks = await c.publishAll(conv, history);
  await c.policy.set(conv, { keep_last_n: 2 });
  assert.equal((await c.compact(conv, { waitMs: 30_000 })).status, "completed");
  const llm = await fakeLLM(t, [
    { content: null, tool_calls: [{ id: "r-1", type: "function", function: { name: "recall", arguments: '{"query":"needle-recall3 "}' } }] },
    { content: "step 3 it was" },
  ]);
  const answer = await runTurn(c, conv, "what was step 3?", { baseUrl: llm.url, model: "fake", tools: { recall: recallTool(c, conv) } });
  assert.equal(answer, "step 3 it was");
  assert.deepStrictEqual(llm.seen[0]!.body.tools, [RECALL_TOOL]);
  const sent = llm.seen[1]!.body.messages;
  const result = JSON.parse(sent[sent.length - 1]!.content as string);
  assert.deepStrictEqual(
    result.messages.map((m: { seq: number; content: string }) => [m.seq, m.content.slice(0, 21)]),
    [[acks[7]!.seq, "step 3 NEEDLE-recall3"]],
  );
});

test("a failing model call fails the turn, after the user's message is stored", async (t) => {
  const c = await compactor(t);
  const llm = await fakeLLM(t, [500]);
  const conv = convId("ts-agent-fail");
  await assert.rejects(runTurn(c, conv, "hello", { baseUrl: llm.url, model: "fake" }), /model call: 500/);
  assert.deepStrictEqual((await c.context(conv)).messages, [{ role: "user", content: "hello" }]);
});
