// One call of the official @anthropic-ai/sdk package through the proxy, for the Go
// tests (internal/proxy/e2etest): the request (model, max_tokens, system, messages,
// tools...) is read as JSON from stdin; E2E_BASE_URL is the proxy's base URL (no /v1),
// E2E_API_KEY the key, E2E_CONVERSATION the X-Compactor-Conversation header. It prints
// one JSON line: {"ok":true,"message":{...},"usage":{...},"headers":{...}} with the
// reply put back together (streamed or not), or {"ok":false,"status":...,...}.
import Anthropic from "@anthropic-ai/sdk";

const input = JSON.parse(await new Promise((resolve) => {
  let s = "";
  process.stdin.on("data", (d) => (s += d));
  process.stdin.on("end", () => resolve(s));
}));

const client = new Anthropic({
  baseURL: process.env.E2E_BASE_URL,
  apiKey: process.env.E2E_API_KEY,
  maxRetries: 0,
  defaultHeaders: process.env.E2E_CONVERSATION ? { "X-Compactor-Conversation": process.env.E2E_CONVERSATION } : {},
});

const headersOf = (h) => Object.fromEntries([...(h?.entries?.() ?? [])]);

// accumulate puts a streamed reply back together from its events: content blocks (a
// tool_use block's input from its input_json_delta pieces), stop reason, usage.
async function accumulate(stream) {
  const message = { role: "assistant", content: [] };
  let usage = {}, stop = null;
  const partial = [];
  for await (const ev of stream) {
    switch (ev.type) {
      case "message_start":
        usage = { ...ev.message.usage };
        break;
      case "content_block_start":
        message.content[ev.index] = { ...ev.content_block };
        partial[ev.index] = "";
        break;
      case "content_block_delta":
        if (ev.delta.type === "text_delta") message.content[ev.index].text += ev.delta.text;
        if (ev.delta.type === "input_json_delta") partial[ev.index] += ev.delta.partial_json;
        break;
      case "content_block_stop":
        if (message.content[ev.index].type === "tool_use") {
          message.content[ev.index].input = partial[ev.index] ? JSON.parse(partial[ev.index]) : {};
        }
        break;
      case "message_delta":
        stop = ev.delta.stop_reason;
        usage.output_tokens = ev.usage.output_tokens;
        break;
    }
  }
  return { message, usage, finish: stop };
}

try {
  const { data, response } = await client.messages.create(input).withResponse();
  let out;
  if (input.stream) {
    out = await accumulate(data);
  } else {
    out = { message: { role: data.role, content: data.content }, usage: data.usage, finish: data.stop_reason };
  }
  console.log(JSON.stringify({ ok: true, ...out, headers: headersOf(response.headers) }));
} catch (e) {
  console.log(JSON.stringify({
    ok: false, status: e.status ?? 0, error: e.error ?? null, message: String(e.message),
    kind: e.constructor?.name, headers: headersOf(e.headers),
  }));
}
