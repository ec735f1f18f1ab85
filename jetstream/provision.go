package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Provision creates or updates every stream, bucket and consumer of the contract. It is
// idempotent: every process may call it at start-up, and a changed setting (retention,
// replicas) is applied to what exists.
func Provision(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream context: %w", err)
	}
	streams := []natsjs.StreamConfig{
		{
			Name:        cfg.ChatStream,
			Description: "Compactor raw chat history, one subject per conversation",
			Subjects:    []string{cfg.ChatWildcard()},
			Storage:     natsjs.FileStorage,
			Retention:   natsjs.LimitsPolicy,
			AllowDirect: true,
			Duplicates:  cfg.DuplicateWindow,
			MaxAge:      cfg.ChatMaxAge,
			Replicas:    cfg.Replicas,
		},
		{
			Name:                 cfg.RequestsStream,
			Description:          "Compactor work queue: at most one pending compaction request per conversation",
			Subjects:             []string{cfg.RequestPrefix + ".*"},
			Storage:              natsjs.FileStorage,
			Retention:            natsjs.WorkQueuePolicy,
			MaxMsgsPerSubject:    1,
			Discard:              natsjs.DiscardNew,
			DiscardNewPerSubject: true,
			Replicas:             cfg.Replicas,
		},
		{
			Name:        cfg.EventsStream,
			Description: "Compactor events: requested, started, completed, declined, failed",
			Subjects:    []string{cfg.EventPrefix + ".*"},
			Storage:     natsjs.FileStorage,
			Retention:   natsjs.LimitsPolicy,
			MaxAge:      cfg.EventsMaxAge,
			Replicas:    cfg.Replicas,
		},
		{
			Name:        cfg.DeadStream,
			Description: "Compactor dead letters: requests that used up their attempts",
			Subjects:    []string{cfg.DeadPrefix + ".*"},
			Storage:     natsjs.FileStorage,
			Retention:   natsjs.LimitsPolicy,
			MaxAge:      cfg.DeadMaxAge,
			Replicas:    cfg.Replicas,
		},
		{
			Name:                   cfg.ActivityStream,
			Description:            "Compactor idle timers: one message per conversation with a TTL",
			Subjects:               []string{cfg.ActivityPrefix + ".*"},
			Storage:                natsjs.FileStorage,
			Retention:              natsjs.LimitsPolicy,
			MaxMsgsPerSubject:      1,
			AllowMsgTTL:            true,
			SubjectDeleteMarkerTTL: cfg.ActivityMarkerTTL,
			Replicas:               cfg.Replicas,
		},
	}
	for _, sc := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("create or update stream %s: %w", sc.Name, err)
		}
	}
	results, err := js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{
		Bucket:      cfg.ResultsBucket,
		Description: "Compactor results: summary plus tail-start pointer per conversation",
		History:     cfg.ResultHistory,
		Storage:     natsjs.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("create or update bucket %s: %w", cfg.ResultsBucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{
		Bucket:      cfg.PolicyBucket,
		Description: "Compactor per-conversation policy: profile and safe knobs",
		History:     1,
		Storage:     natsjs.FileStorage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create or update bucket %s: %w", cfg.PolicyBucket, err)
	}
	consumers := []struct {
		stream string
		cfg    natsjs.ConsumerConfig
	}{
		{cfg.ChatStream, triggerConsumer(cfg, cfg.TriggerConsumer, cfg.ChatWildcard(),
			"Compactor trigger: one active process, the others stand by")},
		{cfg.ActivityStream, triggerConsumer(cfg, cfg.IdleConsumer, cfg.ActivityPrefix+".*",
			"Compactor idle timers: the active trigger reads the markers expired timers leave")},
		{cfg.RequestsStream, natsjs.ConsumerConfig{
			Durable:       cfg.WorkerConsumer,
			Description:   "Compactor summarizer pool, shared by every worker process",
			AckPolicy:     natsjs.AckExplicitPolicy,
			AckWait:       cfg.WorkerAckWait,
			MaxDeliver:    -1,
			MaxAckPending: 10000,
			Replicas:      cfg.Replicas,
		}},
	}
	for _, c := range consumers {
		if _, err := js.CreateOrUpdateConsumer(ctx, c.stream, c.cfg); err != nil {
			return nil, fmt.Errorf("create or update consumer %s on %s: %w", c.cfg.Durable, c.stream, err)
		}
	}
	return &Store{nc: nc, js: js, cfg: cfg, results: results}, nil
}

// triggerConsumer is a consumer only the active trigger process reads: pinned to one
// client of the trigger group, the others standing by until it goes silent.
func triggerConsumer(cfg Config, durable, filter, description string) natsjs.ConsumerConfig {
	return natsjs.ConsumerConfig{
		Durable:        durable,
		Description:    description,
		FilterSubject:  filter,
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckPolicy:      natsjs.AckExplicitPolicy,
		AckWait:        cfg.TriggerAckWait,
		MaxDeliver:     -1,
		MaxAckPending:  4096,
		PriorityPolicy: natsjs.PriorityPolicyPinned,
		PriorityGroups: []string{cfg.TriggerGroup},
		PinnedTTL:      cfg.TriggerPinnedTTL,
		Replicas:       cfg.Replicas,
	}
}

// Open binds to streams and buckets that Provision created, without changing them.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream context: %w", err)
	}
	results, err := js.KeyValue(ctx, cfg.ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s (is a compactor serving this NATS?): %w", cfg.ResultsBucket, err)
	}
	return &Store{nc: nc, js: js, cfg: cfg, results: results}, nil
}
