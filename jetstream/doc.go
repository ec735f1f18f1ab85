// Package jetstream is Compactor's side of NATS JetStream: it provisions the streams,
// buckets and consumers of the wire contract (idempotently), publishes chat messages,
// requests, events and dead letters, reads a conversation with batched direct gets or
// from the stream leader (or newest first in bounded windows, for a recall), and reads
// and compare-and-sets the compaction values.
//
// Store is a small root that hands out one handle per resource, the way nats.go's
// jetstream package does (Stream, Consumer, KeyValue, ObjectStore):
//
//   - Chat: CHAT, the conversations' messages, and the trigger's consumers on it;
//   - Results: the results bucket, the compaction values;
//   - Queue: the work queue, the compaction requests;
//   - Events: the events and the dead letters;
//   - Objects: the objects bucket, the contents over the max payload;
//   - Policies: the policy bucket, the conversations' own settings;
//   - Activity: ACTIVITY, the idle timers, and the trigger's idle consumers;
//   - Membership: the triggers bucket, the trigger processes of a partitioned layout.
//
// The handles are made once with the store (Membership binds its bucket when asked
// for). The store keeps what spans resources: its config, Ping and Status, forgetting
// a conversation everywhere (Forget, Forgotten, TakeBack) and Recall.
//
// It wraps github.com/nats-io/nats.go/jetstream, imported as natsjs. It knows subjects
// and payloads, nothing of triggers or summaries.
package jetstream
