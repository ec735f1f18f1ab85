// Package triggers decides when a conversation needs compacting and queues a request on
// the work queue.
//
// The Trigger is the one active consumer of CHAT and of ACTIVITY's idle markers
// (standby processes wait on the same pinned consumers and take over when it dies). Per
// conversation it keeps an estimate of pinned + summary + tail with a sequence watermark,
// so a redelivered message is never counted twice, and asks for a compaction when a
// budget rule (threshold, token limit, soft threshold, assistant rounds), a structural
// rule (a large tool output) or a temporal rule (an idle conversation) says so — never
// while the newest tool calls are unanswered. With the chars/4 tokenizer (the default) it
// counts a message from one pass over its bytes (schemas.ScanMessage) instead of
// decoding it.
//
// Per-conversation state and its rules (state.go) are pure; the network calls live in
// trigger.go and go through package jetstream.
//
// triggers never imports the summarizer: they meet only on the work queue, the events
// and the KV bucket.
package triggers
