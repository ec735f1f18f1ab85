// Package pretrim shortens tool outputs before a conversation is summarized.
//
// Tool results (file dumps, logs, search pages) are often most of a conversation's
// tokens and least of its meaning. Before the older part of a conversation goes to the
// summarizer, each oversized tool output is cut to its head and tail with a marker in
// between that says how many characters were cut (the same marker the reader uses, see
// assemble.Truncate). User, system and assistant messages are never touched.
//
// Both functions are pure and deterministic, take the summarizer's token estimate
// (tokens.Text: characters / 4) and never change their input. Use ToolOutputs to cap
// each output on its own and TotalBudget to cap all of them together, newest first:
//
//	msgs = pretrim.TotalBudget(pretrim.ToolOutputs(msgs, 4000), 20000)
package pretrim
