// Package fakeupstream is a model provider for tests and for running agents without a
// key: an http.Handler that speaks OpenAI Chat Completions (POST /v1/chat/completions),
// Anthropic Messages (POST /v1/messages, and /v1/messages/count_tokens), the OpenAI
// Responses API (POST /v1/responses) and the Gemini API (POST
// /v1beta/models/<model>:generateContent, :streamGenerateContent?alt=sse and
// :countTokens), streamed the way the real APIs stream (server-sent events, the same
// event names and fields) and not. It records every request it receives (path,
// headers, body, and a wire-neutral view: Messages and System) and answers the
// agent's requests from a script: text, tool calls, usage, an error status with its
// retry header and JSON body, a stream that breaks mid-way, a stream that ends in the
// API's error event, a stream that stalls until its client goes away.
//
// New serves it for a test on a local port; NewHandler makes one to serve with any
// http.Server (compactor fake-model). With Respond set to AgentModel, what the script
// does not answer is answered as a coding model would: one shell tool call a user
// prompt, a text quoting the planted facts once the tool's result is back, and a
// summary in the agent's own shape for a compaction prompt of Claude Code, Codex,
// OpenCode or Gemini CLI (CompactionPrompts).
//
// Usage counts a token as four bytes of the request's conversation (tools, system
// and messages as sent, on every wire), and counts as cached the longest common byte
// prefix with the previous request of the same conversation (Key), so a test can
// measure what a proxy that rewrites the prefix costs in cache reads.
//
// The summarizer's requests (model SummarizerModel, OpenAI wire) are answered apart:
// the summary keeps every planted fact (FACT-…) of its input, so a test can follow
// facts across compactions.
package fakeupstream
