// Package schemas is Compactor's wire contract, version 1: the versioned wire types,
// their JSON Schema files and their validation (this package: data, with no behaviour
// beyond encode, decode and validate, and the contract's one transformation of a
// message, [Message.Offload] and [Message.Restore], for content stored as an object),
// and in its subpackages the rules that every reader and writer, in any language, must
// apply alike to agree on what the contract means.
//
// The payloads are:
//
//   - [Message]: one chat event in OpenAI chat format on chat.<conv>.msg. Its content,
//     extra and unknown top-level fields are kept and written back byte for byte by
//     [Message.Encode]. [DecodeMessage] parses and validates one; [ScanMessage]
//     accepts and refuses the same, reading only what a count needs (role, tool
//     calls, usage, pin, sizes), in one pass over the bytes.
//   - [Request]: a compaction request on compact.request.<conv>.
//   - [Result]: the KV value of key <conv> in bucket "compaction", a summary plus the
//     sequence where the verbatim tail starts. Unknown fields survive a rewrite, and
//     [DecodeResult] refuses a newer schema_version with [*ErrNewerSchema].
//   - [Event] on compact.event.<conv> and [DeadLetter] on compact.dead.<conv>.
//   - [ContentRef]: the reference a message over the NATS max payload carries to its
//     content in the object store ([ObjectName] names the object).
//   - [Evidence]: the files, commands and identifiers a result carries forward.
//   - [Tombstone]: what stays of a forgotten conversation, so no reader serves it
//     again.
//   - The compactor service's requests and answers ([CompactRequest], [CompactResponse],
//     [ConversationRequest], [ContextRequest], [ContextResponse], [ConversationStatus],
//     [PolicyRequest], [PolicyResponse], [RecallRequest], [RecallResponse],
//     [ForgetRequest], [ForgetResponse]) on [CompactSubject], [ContextSubject],
//     [StatusSubject], [PolicySubject], [RecallSubject] and [ForgetSubject].
//   - [RecallToolJSON]: the OpenAI tool definition of recall (recall-tool.json), whose
//     arguments [DecodeRecallArguments] reads.
//
// Every validation error is a [*ValidationError] that names the field and the rule it
// broke, and matches [ErrInvalid] with errors.Is. Conversation ids (1–128 characters of
// [A-Za-z0-9_-]) are checked by [ValidateConversationID] and never rewritten.
//
// [Files] embeds the JSON Schema (draft 2020-12) of each payload, for clients in other
// languages; a test keeps their property names equal to the Go types' JSON names.
//
// Those rules are pure functions, tested with fixtures other languages' clients share,
// one subpackage each:
//
//   - tokens: the token estimate every client computes alike (and tokens/bpe, exact
//     counts for a named encoding);
//   - budget: the window's fractions as token counts (threshold, target, hard limit);
//   - rounds: tool-round boundaries, so no split and no read breaks a tool pair;
//   - assemble: the reader algorithm (pinned + summary + tail, overrides, the
//     MaxTokens cut);
//   - formats: the assembled context in the request shape of the API the agent calls
//     (OpenAI, Anthropic, Responses, Gemini);
//   - recall: which raw messages a recall returns;
//   - policy: how a conversation's settings resolve from the operator's tiers and its
//     own policy, and which keys a conversation may set.
package schemas
