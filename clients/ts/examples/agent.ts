// An agent loop on Compactor: each turn publishes the user's message, reads the
// compacted context, sends it to an OpenAI-compatible endpoint (plain fetch, no SDK),
// publishes what the model answered (tool calls, then each tool's result) and loops
// until the model answers without calling a tool. The history lives in NATS; the model
// is sent pinned messages + summary + recent messages, never the whole history, and may
// call the recall tool for raw messages the summary left out.
//
//   npm run build
//   OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... \
//     node dist/examples/agent.js my-conversation      (one user message per line on stdin)
//
// NATS_URL (and NATS_USER, NATS_PASSWORD, NATS_INBOX_PREFIX, ...) say where Compactor is.

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { Compactor, connectOptionsFromEnv, RECALL_TOOL, type Message, type ToolCall } from "../src/index.js";

/** A tool the model may call: its JSON Schema parameters and what it does. */
export interface Tool {
  description: string;
  parameters: Record<string, unknown>;
  run(args: Record<string, unknown>): Promise<string> | string;
}

export interface AgentOptions {
  /** The endpoint's base URL, e.g. https://api.openai.com/v1 (a URL without a path gets /v1). */
  baseUrl: string;
  apiKey?: string;
  model: string;
  tools?: Record<string, Tool>;
  /** Model calls per turn at most (default 8): a model that keeps calling tools is stopped. */
  maxSteps?: number;
  /** Cut the context at read time to fit the model (tokens; optional). */
  maxTokens?: number;
}

/** The model's answer to one call, as the chat completions API returns it. */
interface Completion {
  choices?: Array<{ message?: { content?: string | null; tool_calls?: ToolCall[]; reasoning?: string } }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number };
}

function endpoint(baseUrl: string): string {
  const u = new URL(baseUrl);
  if (u.pathname === "/" || u.pathname === "") u.pathname = "/v1";
  return `${u.href.replace(/\/$/, "")}/chat/completions`;
}

/**
 * Runs one turn of conversation conv: the user's text in, the model's final answer
 * out. Every message of the turn is published, so another process can take the
 * conversation over at any point, and Compactor compacts it in the background.
 */
export async function runTurn(c: Compactor, conv: string, userText: string, opts: AgentOptions): Promise<string> {
  const tools = opts.tools ?? {};
  let { seq } = await c.publish(conv, { role: "user", content: userText });
  for (let step = 0; step < (opts.maxSteps ?? 8); step++) {
    // atLeastSeq: the read includes what this turn just published (read-your-writes).
    const cx = await c.context(conv, { atLeastSeq: seq, maxTokens: opts.maxTokens });
    const body: Record<string, unknown> = { model: opts.model, messages: cx.messages };
    if (Object.keys(tools).length > 0) {
      body["tools"] = Object.entries(tools).map(([name, t]) => ({
        type: "function",
        function: { name, description: t.description, parameters: t.parameters },
      }));
    }
    const resp = await fetch(endpoint(opts.baseUrl), {
      method: "POST",
      headers: { "content-type": "application/json", ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}) },
      body: JSON.stringify(body),
    });
    if (!resp.ok) throw new Error(`model call: ${resp.status} ${(await resp.text()).slice(0, 500)}`);
    const data = (await resp.json()) as Completion;
    const answer = data.choices?.[0]?.message;
    if (!answer) throw new Error("model call: no choice in the answer");
    const calls = answer.tool_calls ?? [];
    const assistant: Message = { role: "assistant", content: answer.content ?? null };
    if (calls.length > 0) assistant.tool_calls = calls.map((tc) => ({ id: tc.id, type: "function", function: { name: tc.function.name, arguments: tc.function.arguments ?? "" } }));
    if (answer.reasoning) assistant.reasoning = answer.reasoning;
    // The model's own count of the context it was sent, with that context's generation:
    // Compactor's trigger then counts this conversation exactly instead of estimating.
    if (data.usage?.prompt_tokens !== undefined) {
      assistant.usage = { prompt_tokens: data.usage.prompt_tokens, completion_tokens: data.usage.completion_tokens ?? 0 };
      assistant.context_generation = cx.generation;
    }
    seq = (await c.publish(conv, assistant)).seq;
    if (calls.length === 0) return answer.content ?? "";
    for (const tc of calls) {
      const tool = tools[tc.function.name];
      let result: string;
      try {
        const args = tc.function.arguments ? (JSON.parse(tc.function.arguments) as Record<string, unknown>) : {};
        result = tool ? await tool.run(args) : `error: there is no tool named ${tc.function.name}`;
      } catch (e) {
        result = `error: ${(e as Error).message}`; // the model sees the failure and may recover
      }
      seq = (await c.publish(conv, { role: "tool", tool_call_id: tc.id, content: result })).seq;
    }
  }
  throw new Error(`the model was still calling tools after ${opts.maxSteps ?? 8} steps`);
}

/** Tools of the example: harmless, so any model may call them. */
export const exampleTools: Record<string, Tool> = {
  current_time: {
    description: "The current date and time (UTC, ISO 8601).",
    parameters: { type: "object", properties: {} },
    run: () => new Date().toISOString(),
  },
  count_words: {
    description: "Counts the words of a text.",
    parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    run: (args) => String(String(args["text"] ?? "").split(/\s+/).filter(Boolean).length),
  },
};

/**
 * The recall tool for conversation conv: the model asks for raw messages the summary
 * left out (by text or by sequence range; the summary says which range it covers), and
 * the client answers with them (compactor.recall).
 */
export function recallTool(c: Compactor, conv: string): Tool {
  return {
    description: RECALL_TOOL.function.description,
    parameters: RECALL_TOOL.function.parameters as unknown as Record<string, unknown>,
    run: (args) => c.answerRecall(conv, JSON.stringify(args)),
  };
}

async function main(): Promise<void> {
  const conv = process.argv[2];
  if (!conv) {
    console.error("usage: node dist/examples/agent.js <conversation>   (one user message per line on stdin)");
    process.exit(2);
  }
  const env = process.env;
  const opts: AgentOptions = {
    baseUrl: env["OPENAI_BASE_URL"] || "https://api.openai.com/v1",
    apiKey: env["OPENAI_API_KEY"],
    model: env["OPENAI_MODEL"] || "gpt-4o-mini",
  };
  const c = await Compactor.connect(connectOptionsFromEnv());
  opts.tools = { ...exampleTools, recall: recallTool(c, conv) };
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (line.trim()) console.log(await runTurn(c, conv, line, opts));
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
