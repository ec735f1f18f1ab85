// Package mcpserver is Compactor's Model Context Protocol server: the tools an agent
// calls about its own conversation, built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk). `compactor mcp` runs it on stdio or
// streamable HTTP.
//
// The tools are read-only:
//
//   - recall: the raw messages behind the summary that match a query and/or lie in a
//     sequence range, newest first within a token budget the operator caps, a tool
//     call with all its results or not at all, secrets redacted as in the summary's
//     evidence (summarizer/evidence.Redact); the answer names the sequences the budget
//     left out.
//   - status: the conversation's generation, tokens before and after its last
//     compaction and now, where the tail starts, what the summary covers, when it was
//     compacted and which messages are pinned.
//
// A server is bound to one conversation (Config.Conversation), or serves the one a
// tool call names when the operator allows it (Config.AnyConversation); a call that
// names another is refused. What it reads is bounded by the NATS user it connects as:
// a refusal of the server is the tool's error at once. An unknown and a forgotten
// conversation are tool errors that say which.
//
// There is no pin tool: pinning is decided when a message is published (meta.pin), and
// no record lets a reader or worker pin a message already stored.
package mcpserver
