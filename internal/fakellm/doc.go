// Package fakellm is an OpenAI-compatible chat completions endpoint for tests, spoken
// to by the real go-openai client: an httptest server whose summary keeps every needle
// (NEEDLE-…) it finds in its input, so that a test can follow facts across
// generations, with the knobs the tests turn (failures, a fixed status, delay and
// jitter, a context limit, padding, a hook, holding requests until released) and what
// it was asked (inputs, call counts). NeedleConversation is the synthetic agent run
// made for it.
package fakellm
