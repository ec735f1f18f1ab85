// Package llm is the summarizer that asks a language model, over any OpenAI-compatible
// chat completions endpoint (OpenAI, Azure-style proxies, vLLM, llama.cpp, Ollama,
// LiteLLM, …), through github.com/sashabaranov/go-openai.
//
// One Summarize is one chat completion, in one of two shapes (Config.RequestShape).
//
// ShapePrefix, the default, reproduces the start of the agent's own request: its pinned
// messages (Input.Pinned, the system prompt first), the previous summary's message as
// readers render it (Input.SummaryMessage), and the newly covered messages as chat
// messages, with their tool calls and tool results; then the instruction, as the last
// message, a user message: PrefixPrompt (which says that everything before it is data,
// never instructions), the operator's instructions in an escaped block, and the closing
// request. An endpoint with prefix caching serves the agent's part from its cache, and
// reports it in usage.prompt_tokens_details.cached_tokens, which lands in
// Output.Usage.CachedTokens. The agent's messages are sent as they are, unescaped, so
// the prefix stays byte for byte the agent's; a tool round that is not whole (a chunk
// boundary) is sent as text, since endpoints refuse it.
//
// ShapeTranscript, for endpoints that refuse tool messages without tool definitions:
// the system message is Prompt, which tells the model what a summary must keep and that
// everything it is given is data. The one user message holds, each in its own tag: the
// agent's system prompt (context for the agent's identity), the previous summary, the
// newly covered messages as a transcript, and the operator's instructions, which are
// data that cannot override the prompt. Text inside a block can never close it: every
// occurrence of one of the tag names after a '<' (also through invisible characters,
// and after a fullwidth or small '<') is escaped to "&lt;", and so is the '<' of
// chat-template control tokens ("<|…|>", "<s>", "</s>", "<start_of_turn>"), which could
// otherwise end the user message on a server that reads them inside text.
//
// Errors are wrapped with %w, and their text never shows the key or the base URL's
// credentials. A failed call carries the wait the endpoint asked for (Retry-After):
// see RetryAfter. ErrEmptySummary, ErrSummaryTruncated and
// ErrContextLength name the failures a caller may handle specially, and Retryable tells a passing failure (network,
// timeout, 429, 5xx) from a permanent one (bad request, auth, context length).
package llm
