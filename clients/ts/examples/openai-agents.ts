// An OpenAI Agents SDK agent on Compactor: its runs use a CompactorSession, so every
// item of the conversation is published to Compactor and each run starts from the
// compacted context (pinned messages, the summary, the recent messages) instead of the
// whole history. The agent may call recall for raw messages the summary left out.
//
//   npm run build
//   OPENAI_API_KEY=sk-... MODEL=gpt-4o-mini \
//     node dist/examples/openai-agents.js my-conversation      (one user message per line on stdin)
//
// NATS_URL (and NATS_USER, ...) say where Compactor is.

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { Agent, run, tool, type Model } from "@openai/agents";
import { CompactorSession } from "../src/adapters/openai-agents.js";
import { Compactor, connectOptionsFromEnv, RECALL_TOOL } from "../src/index.js";

/** A tool's JSON Schema parameters as tool() takes them (non-strict: additionalProperties true). */
type ToolParameters = Extract<Parameters<typeof tool>[0]["parameters"], { additionalProperties: true }>;

/** The recall tool of conversation conv, answered by Compactor. */
export function recallTool(c: Compactor, conv: string) {
  return tool({
    name: RECALL_TOOL.function.name,
    description: RECALL_TOOL.function.description,
    parameters: { ...RECALL_TOOL.function.parameters, additionalProperties: true } as unknown as ToolParameters,
    strict: false,
    execute: async (args) => c.answerRecall(conv, JSON.stringify(args)),
  });
}

/** An agent with the recall tool of conversation conv; model is a model name or a Model. */
export function agentFor(c: Compactor, conv: string, model: string | Model) {
  return new Agent({
    name: "assistant",
    instructions: "You are a helpful assistant. Older parts of this conversation may be summarized; call recall for details the summary left out.",
    model,
    tools: [recallTool(c, conv)],
  });
}

/** One turn of conversation conv: the user's text in, the agent's final output out. */
export async function turn(c: Compactor, conv: string, model: string | Model, userText: string): Promise<string> {
  const result = await run(agentFor(c, conv, model), userText, { session: new CompactorSession(c, conv, { waitPendingMs: 5000 }) });
  return String(result.finalOutput ?? "");
}

async function main(): Promise<void> {
  const conv = process.argv[2];
  if (!conv) {
    console.error("usage: node dist/examples/openai-agents.js <conversation>   (one user message per line on stdin)");
    process.exit(2);
  }
  const c = await Compactor.connect(connectOptionsFromEnv());
  const model = process.env["MODEL"] || "gpt-4o-mini";
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (line.trim()) console.log(await turn(c, conv, model, line));
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
