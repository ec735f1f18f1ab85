// Package mask is the first rung of a compaction: it replaces old tool outputs by a
// placeholder that says what was there and how to recall it, with no LLM call.
//
// A masked output is an override (schemas.Override) that keeps nothing of the text:
// KeepHead and KeepTail are 0, and its Note names the tool, the call and the
// recall that returns the output whole, so every reader (Go, TypeScript) shows
//
//	[… 6400 characters cut by Compactor: tool output of bash (call call_7) masked;
//	recall it with compactor recall conv-1 --from-seq 811 --to-seq 812 --max-tokens 1799,
//	or compactor.recall (the recall tool) with from_seq 811, to_seq 812, max_tokens 1799 …]
//
// in the tool message's place. The message itself stays: its role and tool_call_id,
// so an assistant's tool call and its results are never split. The note holds no
// word of the output.
//
// Outputs is pure and deterministic, and never changes its input.
package mask
