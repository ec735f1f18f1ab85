// Package triggers decides when a conversation needs compacting and queues a request on
// the work queue. The budget trigger is the one active consumer of CHAT (standby
// processes wait on the same pinned consumer and take over when it dies); it keeps a
// per-conversation estimate of pinned + summary + tail with a sequence watermark, so a
// redelivered message is never counted twice, and it never queues while the newest
// tool calls are unanswered.
//
// triggers never imports the summarizer: they meet only on the work queue, the events
// and the KV bucket.
package triggers
