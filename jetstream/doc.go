// Package jetstream is Compactor's side of NATS JetStream: it provisions the streams,
// buckets and consumers of the wire contract (idempotently), publishes chat messages,
// requests, events and dead letters, reads a conversation with batched direct gets or
// from the stream leader (or newest first in bounded windows, for a recall), and reads
// and compare-and-sets the compaction values.
//
// It wraps github.com/nats-io/nats.go/jetstream, imported as natsjs. It knows subjects
// and payloads, nothing of triggers or summaries.
package jetstream
