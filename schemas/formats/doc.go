// Package formats renders an assembled context (schemas/assemble.Context) as the
// request fragment of the API the agent actually calls: OpenAI chat completions
// (openai), Anthropic Messages (anthropic), OpenAI Responses (responses) and Gemini
// generateContent (gemini). It is pure: no NATS, no LLM client.
//
// Every renderer is deterministic (the same context gives the same bytes) and
// cache-friendly by construction: the bytes that render the pinned messages and the
// summary do not depend on any later message, so between two compactions the rendered
// prefix is byte-identical and providers' prompt caches hit. [Request.Prefix] says how
// many leading bytes that prefix is.
//
// The choices each format makes where the provider's API differs from the OpenAI chat
// format (system messages, roles that must alternate, tool calls, content parts,
// reasoning and extra) are listed on [Render] and in docs/clients.md, section "The agent's
// own format".
package formats
