// One call of the official openai package through the proxy, for the Go tests
// (internal/proxy/e2etest): the request (model, messages, tools...) is read as JSON
// from stdin; E2E_BASE_URL is the proxy's base URL (".../v1"), E2E_API_KEY the key,
// E2E_CONVERSATION the X-Compactor-Conversation header. It prints one JSON line:
// {"ok":true,"message":{...},"usage":{...},"headers":{...}} with the reply put back
// together (streamed or not), or {"ok":false,"status":...,"error":...,"headers":{...}}.
import OpenAI from "openai";

const input = JSON.parse(await new Promise((resolve) => {
  let s = "";
  process.stdin.on("data", (d) => (s += d));
  process.stdin.on("end", () => resolve(s));
}));

const client = new OpenAI({
  baseURL: process.env.E2E_BASE_URL,
  apiKey: process.env.E2E_API_KEY,
  maxRetries: 0,
  defaultHeaders: process.env.E2E_CONVERSATION ? { "X-Compactor-Conversation": process.env.E2E_CONVERSATION } : {},
});

const headersOf = (h) => Object.fromEntries([...(h?.entries?.() ?? [])]);

// accumulate puts a streamed reply back together: text, tool calls by index, usage.
async function accumulate(stream) {
  const message = { role: "assistant", content: "", tool_calls: [] };
  let usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices ?? []) {
      if (c.finish_reason) finish = c.finish_reason;
      if (c.delta?.content) message.content += c.delta.content;
      for (const tc of c.delta?.tool_calls ?? []) {
        const cur = (message.tool_calls[tc.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } });
        if (tc.id) cur.id = tc.id;
        if (tc.function?.name) cur.function.name += tc.function.name;
        if (tc.function?.arguments) cur.function.arguments += tc.function.arguments;
      }
    }
  }
  return { message, usage, finish };
}

try {
  const { data, response } = await client.chat.completions.create(input).withResponse();
  let out;
  if (input.stream) {
    out = await accumulate(data);
  } else {
    out = { message: data.choices[0].message, usage: data.usage, finish: data.choices[0].finish_reason };
  }
  if (!out.message.tool_calls?.length) delete out.message.tool_calls;
  console.log(JSON.stringify({ ok: true, ...out, headers: headersOf(response.headers) }));
} catch (e) {
  console.log(JSON.stringify({
    ok: false, status: e.status ?? 0, error: e.error ?? null, message: String(e.message),
    kind: e.constructor?.name, headers: headersOf(e.headers),
  }));
}
