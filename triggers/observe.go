package triggers

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
)

// RequestResult is what the work queue said to a request the trigger made.
type RequestResult string

// The results of a request. The set is closed: an observer may use them as metric
// label values.
const (
	// RequestQueued: the request is in the queue.
	RequestQueued RequestResult = "queued"
	// RequestPending: one was already pending for the conversation; asked again later.
	RequestPending RequestResult = "pending"
	// RequestError: the queue could not be reached; the message is delivered again.
	RequestError RequestResult = "error"
)

// Observer hears what the trigger does, for metrics. It is called from the trigger's
// handlers and must not block. Nothing it is given names a conversation, so what it
// makes of it (metric labels) stays bounded.
type Observer interface {
	// Counted: the trigger handled a chat message stored age ago (its lag).
	Counted(age time.Duration)
	// Requested: the trigger asked for a compaction of kind (schemas.TriggerBudget, …).
	Requested(kind string, result RequestResult)
}

// UsageObserver is an Observer that also hears of the usage the trigger ignored. An
// Observer that does not implement it is not told.
type UsageObserver interface {
	// UsageIgnored: a reply's usage (prompt_tokens + completion_tokens) was under half
	// the trigger's estimate of the context, and the estimate was kept.
	UsageIgnored()
}

// usageIgnored logs and counts a reply's usage the trigger did not believe.
func (t *Trigger) usageIgnored(u ignoredUsage, log zerolog.Logger) {
	log.Warn().Int("usage_tokens", u.reported).Int("estimate_tokens", u.estimate).
		Msg("reply's usage is under half the estimate of its context and is ignored; send prompt_tokens with the cached tokens included (docs/wire.md)")
	if o, ok := t.cfg.Observer.(UsageObserver); ok {
		o.UsageIgnored()
	}
}

func (t *Trigger) counted(d *jetstream.Delivery) {
	if t.cfg.Observer != nil && !d.Time.IsZero() {
		t.cfg.Observer.Counted(max(t.now().Sub(d.Time), 0))
	}
}

func (t *Trigger) requested(kind string, r RequestResult) {
	if t.cfg.Observer != nil {
		t.cfg.Observer.Requested(kind, r)
	}
}

// Partitions returns the partitions whose consumers this trigger reads: the
// unpartitioned one, or its partition.
func (t *Trigger) Partitions() []jetstream.Partition { return []jetstream.Partition{t.part} }

// Partitions returns the partitions this process runs a trigger on.
func (ps *Partitions) Partitions() []jetstream.Partition {
	owned := ps.Owned()
	out := make([]jetstream.Partition, len(owned))
	for i, p := range owned {
		out[i] = jetstream.Partition{N: len(ps.parts), P: p}
	}
	return out
}

// Tracked returns how many conversations the triggers of this process's partitions
// hold state for.
func (ps *Partitions) Tracked() int {
	ps.mu.Lock()
	ts := make([]*Trigger, 0, len(ps.running))
	for _, r := range ps.running {
		ts = append(ts, r.t)
	}
	ps.mu.Unlock()
	n := 0
	for _, t := range ts {
		n += t.Tracked()
	}
	return n
}
