// An AI SDK agent on Compactor: the model is wrapped with compactorMiddleware, so every
// message of the conversation is published to Compactor and the model is sent the
// compacted context (pinned messages, the summary, the recent messages). The
// application keeps no history of its own: each turn hands over only the user's new
// message. The model may call recall for raw messages the summary left out.
//
//   npm run build
//   AI_GATEWAY_API_KEY=... MODEL=openai/gpt-4o-mini \
//     node dist/examples/ai-sdk.js my-conversation      (one user message per line on stdin)
//
// Any AI SDK model works in place of the gateway's (wrapLanguageModel takes a provider's
// model, e.g. openai("gpt-4o") of @ai-sdk/openai). NATS_URL (and NATS_USER, ...) say
// where Compactor is.

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { gateway, generateText, jsonSchema, stepCountIs, tool, wrapLanguageModel, type ToolSet } from "ai";
import { compactorMiddleware } from "../src/adapters/ai-sdk.js";
import { Compactor, connectOptionsFromEnv, RECALL_TOOL } from "../src/index.js";

type Model = Parameters<typeof wrapLanguageModel>[0]["model"];

/** The recall tool of conversation conv, answered by Compactor. */
export function recallTool(c: Compactor, conv: string) {
  return tool({
    description: RECALL_TOOL.function.description,
    inputSchema: jsonSchema<Record<string, unknown>>(RECALL_TOOL.function.parameters as Parameters<typeof jsonSchema>[0]),
    execute: async (args: Record<string, unknown>) => c.answerRecall(conv, JSON.stringify(args)),
  });
}

/**
 * One turn of conversation conv: the user's text in, the model's answer out, with as
 * many tool steps as the model takes (at most 8).
 */
export async function turn(c: Compactor, conv: string, model: Model, userText: string, tools: ToolSet = {}): Promise<string> {
  const wrapped = wrapLanguageModel({ model, middleware: compactorMiddleware(c, conv, { waitPendingMs: 5000 }) });
  const r = await generateText({
    model: wrapped,
    instructions: "You are a helpful assistant. Older parts of this conversation may be summarized; call recall for details the summary left out.",
    messages: [{ role: "user", content: userText }],
    tools: { ...tools, recall: recallTool(c, conv) },
    stopWhen: stepCountIs(8),
  });
  return r.text;
}

async function main(): Promise<void> {
  const conv = process.argv[2];
  if (!conv) {
    console.error("usage: node dist/examples/ai-sdk.js <conversation>   (one user message per line on stdin)");
    process.exit(2);
  }
  const c = await Compactor.connect(connectOptionsFromEnv());
  const model = gateway(process.env["MODEL"] || "openai/gpt-4o-mini");
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
