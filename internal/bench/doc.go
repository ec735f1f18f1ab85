// Package bench measures Compactor against plain JetStream on the same server, in the
// same run: ingest, trigger latency, context reads, compaction cost, worker scale-out,
// the trigger's heap per conversation, and (a seeded simulation over the corpus) the
// tokens compaction saves an agent. `compactor bench` is its command; only cmd imports
// it.
//
// Every figure uses the real pieces (jetstream.Provision, triggers.Trigger,
// summarizer.Pool with the go-openai client against an httptest LLM, the pipeline
// client) against a nats-server, by default a standalone process. The baselines speak
// JetStream directly (async publishing, a bare pull consumer, an ordered consumer,
// direct gets): they are what Compactor is compared with, not part of it. Each
// measurement works in a namespace of its own (stream, subject, bucket and consumer
// names prefixed), so a run against a shared server leaves the contract's own names
// alone, and the namespace is deleted afterwards.
package bench
