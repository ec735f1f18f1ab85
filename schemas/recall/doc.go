// Package recall selects the raw messages of a conversation that an agent asks back
// with the recall operation: those matching a text query and/or a sequence range,
// newest first within a token budget, a tool round (an assistant's tool calls and all
// their results) returned whole or not at all.
//
// It is pure logic over entries (sequence + message): no NATS. A reader (package
// jetstream's Store.Recall) feeds a Selector the conversation's entries in chunks,
// newest chunk first, each in stream order; Carry says which leading entries of a chunk
// belong with the next, older one, so a round is never split between chunks.
//
// Decisions, the same on every surface:
//
//   - Order: units (a round, or one message outside any round) newest first; the
//     messages of a round in stream order (the call before its results), so a round
//     reads as it happened. Every message carries its CHAT sequence.
//   - Matching: a case-insensitive substring of the message's text (string content or
//     text parts), name, reasoning, tool_call_id, tool calls' names and arguments. A
//     round matches when any of its messages does: a matching result pulls in its call
//     and the other results of the round. An empty query matches every message.
//   - Budget: units are taken newest first while they fit; a unit that does not fit the
//     budget left is skipped (counted, its first sequence reported) and older, smaller
//     units are still taken. A unit larger than the whole budget is never truncated:
//     it is skipped and named, so the caller can recall its range with a larger budget.
//     An optional bound on the answer's bytes (Options.MaxBytes) skips units the same
//     way and sets CutByPayload.
//   - Large messages: a stub (content stored as an object) is weighed by its object's
//     size (Weigh, Bytes) and selected as it is; the reader fetches the objects of the
//     selected stubs only (Selector.ResolveStubs), and tells whether a stub's object
//     holds the query (Options.StubMatches), so no object is held that is not returned.
//   - Incomplete rounds (a result whose call is outside the range or gone from the
//     stream, calls whose results are not all there) are left out and counted; a
//     message that landed inside such a round stays, as a unit of its own.
//   - Invalid stored messages are skipped and counted.
//   - Compactor's own metadata (tokens, usage, context_generation, meta) is stripped.
package recall
