// Package extractive is a summarizer without an LLM.
//
// It is used when no LLM endpoint is configured, and as the fallback that keeps a
// conversation under its hard limit while the LLM is down. It writes no prose: the
// summary is a header line, the previous summary carried forward, and one line per
// newly covered message in order, quoting the start of each:
//
//	Extractive summary, written without an LLM: excerpts of 4 messages in order.
//	- user: "Deploy build 4512 to staging, not prod."
//	- assistant called deploy({"build":4512,"env":"staging"})
//	- result of deploy (38 characters): "ok: staging now runs 4512 (rev 9f3c2e)"
//	- assistant: Build 4512 is live on staging.
//
// The summary always fits Input.MaxSummaryTokens by the shared estimate (tokens.Text).
// When the excerpts are too long, detail goes first: tool results, then tool calls,
// then assistant text (each oldest first), then the oldest part of the previous
// summary, and user messages last; one line says what was left out. The same input
// always gives byte for byte the same summary.
package extractive
