// Package mcpserver is Compactor's Model Context Protocol server: the tools an agent
// calls about its own conversation, built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk). `compactor mcp` runs it on stdio or
// streamable HTTP.
//
// The tools are read-only, but pin, which the operator enables (Config.AllowPin):
//
//   - recall: the raw messages behind the summary that match a query and/or lie in a
//     sequence range, newest first within a token budget the operator caps, a tool
//     call with all its results or not at all, secrets redacted as in the summary's
//     evidence (summarizer/evidence.Redact); the answer names the sequences the budget
//     left out.
//   - status: the conversation's generation, tokens before and after its last
//     compaction and now, where the tail starts, what the summary covers, when it was
//     compacted and which messages are pinned.
//   - pin (only when allowed): adds a message, with its tool round, to the
//     conversation's pins.
//
// A server is bound to one conversation (Config.Conversation), or serves the one a
// tool call names when the operator allows it (Config.AnyConversation); a call that
// names another is refused. What it reads is bounded by the NATS user it connects as:
// a refusal of the server is the tool's error at once. An unknown and a forgotten
// conversation are tool errors that say which.
//
// pin keeps a message verbatim through later compactions: it reads the unit holding
// the message with the recall operation (the whole tool round of a call or a result)
// and adds its sequences to the conversation's pins policy key through the compactor
// service (compactor.policy), at most policy.MaxPins per conversation. The workers
// honour the key from the next compaction on; a message already summarized comes
// back verbatim then.
package mcpserver
