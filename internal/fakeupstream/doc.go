// Package fakeupstream is a model provider for tests: an httptest server that speaks
// OpenAI Chat Completions (POST /v1/chat/completions) and Anthropic Messages (POST
// /v1/messages, and /v1/messages/count_tokens), streamed the way the real APIs stream
// (server-sent events, the same event names and fields) and not. It records every
// request it receives (path, headers, body) and answers the agent's requests from a
// script: text, tool calls, usage, an error status with its retry header and JSON
// body, a stream that breaks mid-way, a stream that ends in the API's error event, a
// stream that stalls until its client goes away.
//
// Usage counts a token as four bytes of the request's conversation (system, messages
// and tools as sent), and counts as cached the longest common byte prefix with the
// previous request of the same conversation (Key), so a test can measure what a proxy
// that rewrites the prefix costs in cache reads.
//
// The summarizer's requests (model SummarizerModel, OpenAI wire) are answered apart:
// the summary keeps every planted fact (FACT-…) of its input, so a test can follow
// facts across compactions.
package fakeupstream
