// Package extractive is a summarizer without an LLM.
//
// It is used when no LLM endpoint is configured, and as the fallback that keeps a
// conversation under its hard limit while the LLM is down. It writes no prose: the
// summary is a header line and one line per covered message in order, quoting the
// start of each:
//
//	Extractive summary, written without an LLM: excerpts of 4 messages in order.
//	- user: "Deploy build 4512 to staging, not prod."
//	- assistant called deploy({"build":4512,"env":"staging"})
//	- result of deploy (38 characters): "ok: staging now runs 4512 (rev 9f3c2e)"
//	- assistant: Build 4512 is live on staging.
//
// A previous summary this package wrote is read back: its lines are carried forward one
// by one ahead of the new ones, under one new header that counts all their messages. A
// previous summary written by anything else (an LLM) is carried as one block before
// the lines, followed by "Messages since then:".
//
// The summary always fits Input.MaxSummaryTokens by the shared estimate (tokens.Text).
// When the lines are too long, detail goes first: tool results, then tool calls, then
// assistant text (each oldest first, carried lines before new ones), then the oldest
// part of a previous summary written by anything else, then the oldest user messages;
// the last user message left is cut short rather than left out when enough of it fits.
// One line, the second, says what was left out; its counts add up what earlier
// extractive summaries left out too. The same input always gives byte for byte the same
// summary.
//
// Secrets are redacted (evidence.Redact) before anything is quoted or cut: a URL's
// password, api_key= and token= values, Authorization headers, well-known key shapes,
// PEM private keys. An earlier extractive summary is redacted as it is read back.
package extractive
