package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Provision makes sure every stream, bucket and consumer of the contract exists; every
// process may call it at start-up. What is missing is created. What exists is compared
// with cfg and, by default, never changed: a process must not rewrite what other
// processes (other versions, other settings) rely on, such as how long CHAT keeps raw
// history. When a setting differs (subjects, retention, storage, replicas, max age,
// duplicate window, per-subject limits, TTLs, bucket history, consumer settings), the
// error is a *ConflictError, matching ErrConflict, that names each difference, and
// nothing was changed. With cfg.UpdateExisting the differing settings are applied
// instead, except those that cannot be changed in place (storage, retention, a
// consumer's policies), which stay a conflict.
func Provision(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	st, _, err := provision(ctx, nc, cfg)
	return st, err
}

// provision is Provision; it also returns the differences it applied. The streams come
// first, then the buckets and the object store, then the consumers on the streams.
func provision(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, []Difference, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncTimeout(PublishAsyncTimeout))
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream context: %w", err)
	}
	p := &provisioner{js: js, nc: nc, update: cfg.UpdateExisting}
	for _, sc := range streamConfigs(cfg) {
		if err := p.stream(ctx, sc); err != nil {
			return nil, nil, err
		}
	}
	if lc, ok := ledgerStreamConfig(cfg); ok {
		if err := p.optionalStream(ctx, lc); err != nil {
			return nil, nil, err
		}
	}
	for _, kc := range bucketConfigs(cfg) {
		if optionalBucket(cfg, kc.Bucket) {
			if err := p.optionalBucket(ctx, kc); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err := p.bucket(ctx, kc); err != nil {
			return nil, nil, err
		}
	}
	if err := p.objectStore(ctx, objectsStreamConfig(cfg)); err != nil {
		return nil, nil, err
	}
	for _, c := range consumerConfigs(cfg) {
		if err := p.consumer(ctx, c); err != nil {
			return nil, nil, err
		}
	}
	if len(p.conflicts) > 0 {
		return nil, nil, &ConflictError{Differences: p.conflicts}
	}
	results, err := js.KeyValue(ctx, cfg.ResultsBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("bucket %s: %w", cfg.ResultsBucket, err)
	}
	st, err := newStore(nc, js, cfg, results)
	if st != nil {
		st.missingBuckets, st.pendingUpgrades = p.skipped, p.upgrades
	}
	return st, p.applied, err
}

// optionalBucket reports whether a process works without the bucket: the learned
// summarizer windows (workers then learn each for themselves) and the deployment
// records (processes then compare no policy defaults). A deployment made by an
// earlier version lacks both until an admin provisions, and a least-privilege process
// of this version still starts.
func optionalBucket(cfg Config, bucket string) bool {
	return bucket == cfg.WindowsBucket || bucket == cfg.DeploymentBucket
}

// ledgerStreamConfig is the savings ledger's stream; ok is false when cfg names none.
func ledgerStreamConfig(cfg Config) (natsjs.StreamConfig, bool) {
	if cfg.LedgerStream == "" {
		return natsjs.StreamConfig{}, false
	}
	maxAge, maxBytes := cfg.LedgerMaxAge, cfg.LedgerMaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	return natsjs.StreamConfig{
		Name:        cfg.LedgerStream,
		Description: "Compactor savings ledger: what the proxy sent models and would have sent, one entry per phase of each exchange",
		Subjects:    []string{cfg.LedgerPrefix + ".*"},
		Storage:     natsjs.FileStorage,
		Retention:   natsjs.LimitsPolicy,
		Duplicates:  cfg.DuplicateWindow,
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		Discard:     natsjs.DiscardOld,
		Replicas:    cfg.Replicas,
	}, true
}

// optionalStream provisions sc like stream, except that a stream this user may not
// create (or read) is left missing, noted for MissingBuckets, instead of failing the
// start: the savings ledger, which a deployment of an earlier version lacks until an
// admin provisions.
func (p *provisioner) optionalStream(ctx context.Context, sc natsjs.StreamConfig) error {
	create, info := "$JS.API.STREAM.CREATE."+sc.Name, "$JS.API.STREAM.INFO."+sc.Name
	rctx, cancel := RefusedContext(ctx, p.nc, func(pe *PermissionError) bool {
		return pe.Subject == create || pe.Subject == info || pe.Subject == "$JS.API.INFO"
	})
	defer cancel()
	err := p.stream(rctx, sc)
	var pe *PermissionError
	if errors.As(PermissionCause(rctx, err), &pe) {
		p.skipped = append(p.skipped, sc.Name)
		return nil
	}
	return err
}

// optionalBucket provisions kc like bucket, except that a bucket this user may not
// create is left missing (noted for MissingBuckets) instead of failing the start: the
// server's refusal of the create ends the wait at once.
func (p *provisioner) optionalBucket(ctx context.Context, kc natsjs.KeyValueConfig) error {
	// nats.go reads the account's info before it creates a bucket.
	create := "$JS.API.STREAM.CREATE.KV_" + kc.Bucket
	rctx, cancel := RefusedContext(ctx, p.nc, func(pe *PermissionError) bool {
		return pe.Subject == create || pe.Subject == "$JS.API.INFO"
	})
	defer cancel()
	err := p.bucket(rctx, kc)
	var pe *PermissionError
	if errors.As(PermissionCause(rctx, err), &pe) {
		p.skipped = append(p.skipped, kc.Bucket)
		return nil
	}
	return err
}

// chatMaxBytes is CHAT's max_bytes: -1 (no bound) unless ChatMaxBytes sets one.
func chatMaxBytes(cfg Config) int64 {
	if cfg.ChatMaxBytes > 0 {
		return cfg.ChatMaxBytes
	}
	return -1
}

// chatDiscard is CHAT's discard policy: with a bound on its bytes, a publish over it is
// refused instead of the oldest messages being dropped.
func chatDiscard(cfg Config) natsjs.DiscardPolicy {
	if cfg.ChatMaxBytes > 0 {
		return natsjs.DiscardNew
	}
	return natsjs.DiscardOld
}

// streamConfigs are the contract's streams: CHAT, the work queue, events, dead letters
// and the idle timers.
func streamConfigs(cfg Config) []natsjs.StreamConfig {
	return []natsjs.StreamConfig{
		{
			Name:        cfg.ChatStream,
			Description: "Compactor raw chat history, one subject per conversation",
			Subjects:    []string{cfg.ChatWildcard()},
			Storage:     natsjs.FileStorage,
			Retention:   natsjs.LimitsPolicy,
			AllowDirect: true,
			Duplicates:  cfg.DuplicateWindow,
			MaxAge:      cfg.ChatMaxAge,
			MaxBytes:    chatMaxBytes(cfg),
			Discard:     chatDiscard(cfg),
			Replicas:    cfg.Replicas,
			// Partitioned: stored under the conversation's partition (see
			// Config.TriggerPartitions); published on chat.<conv>.msg as always.
			SubjectTransform: cfg.chatTransform(cfg.TriggerPartitions),
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
			SubjectTransform:       cfg.activityTransform(cfg.TriggerPartitions),
		},
	}
}

// bucketConfigs are the contract's key-value buckets: results, policies, tombstones, the
// learned windows, the deployment's records and, with more than one trigger partition,
// the trigger processes' presence.
func bucketConfigs(cfg Config) []natsjs.KeyValueConfig {
	buckets := []natsjs.KeyValueConfig{
		{
			Bucket:      cfg.ResultsBucket,
			Description: "Compactor results: summary plus tail-start pointer per conversation",
			History:     cfg.ResultHistory,
			Storage:     natsjs.FileStorage,
			Replicas:    cfg.Replicas,
		},
		{
			Bucket:      cfg.PolicyBucket,
			Description: "Compactor per-conversation policy: profile and safe knobs",
			History:     1,
			Storage:     natsjs.FileStorage,
			Replicas:    cfg.Replicas,
		},
		{
			Bucket:      cfg.ForgetBucket,
			Description: "Compactor tombstones of forgotten conversations, keyed by the SHA-256 of the id",
			History:     1,
			TTL:         cfg.ForgetTTL,
			Storage:     natsjs.FileStorage,
			Replicas:    cfg.Replicas,
		},
		{
			Bucket:      cfg.WindowsBucket,
			Description: "Compactor learned context windows of the summarizer endpoints, keyed by the SHA-256 of endpoint and model",
			History:     1,
			TTL:         LearnedWindowTTL,
			Storage:     natsjs.FileStorage,
			Replicas:    cfg.Replicas,
		},
		{
			// No TTL: a record stays as long as the deployment runs its role, however
			// long ago its process started.
			Bucket:      cfg.DeploymentBucket,
			Description: "Compactor deployment records: the policy defaults each role runs with, key policy.<role>",
			History:     1,
			Storage:     natsjs.FileStorage,
			Replicas:    cfg.Replicas,
		},
	}
	if cfg.TriggerPartitions > 1 {
		buckets = append(buckets, natsjs.KeyValueConfig{
			Bucket:      cfg.TriggersBucket,
			Description: "Compactor trigger processes sharing the trigger's partitions: one key per live process",
			History:     1,
			TTL:         cfg.TriggersTTL(),
			Storage:     natsjs.MemoryStorage,
			Replicas:    cfg.Replicas,
		})
	}
	return buckets
}

// objectsStreamConfig is the stream of the objects bucket: nats.go's object store
// stream (its subjects, discard policy and direct gets, so every NATS client reads the
// bucket) with roll-ups refused. An object store allows them, and then any user that
// may store objects erases the whole bucket with one publish carrying Nats-Rollup: all,
// or every earlier description of a name with Nats-Rollup: sub. Compactor's clients
// store objects without roll-ups (Objects.Put). ObjectsMaxBytes bounds it.
func objectsStreamConfig(cfg Config) natsjs.StreamConfig {
	b := cfg.ObjectsBucket
	maxBytes := int64(-1)
	if cfg.ObjectsMaxBytes > 0 {
		maxBytes = cfg.ObjectsMaxBytes
	}
	return natsjs.StreamConfig{
		Name:        objectsStream(b),
		Description: "Compactor objects: contents of messages over the max payload, named <conv>/<sha256>",
		Subjects:    []string{"$O." + b + ".C.>", "$O." + b + ".M.>"},
		MaxAge:      cfg.ObjectsTTL(),
		MaxBytes:    maxBytes,
		Storage:     natsjs.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
		Discard:     natsjs.DiscardNew,
		AllowRollup: false,
		AllowDirect: true,
	}
}

// streamConsumer is a durable consumer and the stream it reads.
type streamConsumer struct {
	stream string
	cfg    natsjs.ConsumerConfig
	// keepsExplicit: an existing consumer that acknowledges each message explicitly
	// keeps doing so in place of cfg's ack policy, and that is no conflict (the chat
	// trigger consumers made before acknowledgements were batched; see
	// Consumption.AcksAll). An ack policy cannot be changed in place.
	keepsExplicit bool
}

// consumerConfigs are the contract's consumers: the workers' one on the work queue, and
// each trigger partition's on CHAT and on the idle timers.
func consumerConfigs(cfg Config) []streamConsumer {
	consumers := []streamConsumer{
		{stream: cfg.RequestsStream, cfg: natsjs.ConsumerConfig{
			Durable:       cfg.WorkerConsumer,
			Description:   "Compactor summarizer pool, shared by every worker process",
			AckPolicy:     natsjs.AckExplicitPolicy,
			AckWait:       cfg.WorkerAckWait,
			MaxDeliver:    -1,
			MaxAckPending: 10000,
			Replicas:      cfg.Replicas,
		}},
	}
	for _, part := range cfg.Partitions() {
		// One partition: the descriptions of the wire contract's consumers, unchanged.
		chatWhat := "Compactor trigger: one active process, the others stand by"
		idleWhat := "Compactor idle timers: the active trigger reads the markers expired timers leave"
		if part.Partitioned() {
			chatWhat = fmt.Sprintf("Compactor trigger, partition %s: its owner is active, the others stand by", part)
			idleWhat = fmt.Sprintf("Compactor idle timers, partition %s: its owner reads the markers expired timers leave", part)
		}
		chat := triggerConsumer(cfg, cfg.TriggerConsumerOf(part), cfg.chatFilterOf(part), chatWhat)
		chat.AckPolicy = natsjs.AckAllPolicy // see Consumption.AcksAll
		consumers = append(consumers,
			streamConsumer{stream: cfg.ChatStream, cfg: chat, keepsExplicit: true},
			streamConsumer{stream: cfg.ActivityStream, cfg: triggerConsumer(cfg, cfg.IdleConsumerOf(part), cfg.activityFilterOf(part), idleWhat)})
	}
	return consumers
}

// provisioner creates what is missing and compares what exists.
type provisioner struct {
	js        natsjs.JetStream
	nc        *nats.Conn
	update    bool
	skipped   []string     // optional buckets missing that this user may not create
	conflicts []Difference // left alone
	applied   []Difference // changed (update only)
	upgrades  []Difference // left alone until an update: not conflicts (objectStore)
}

// resolve records the differences of one existing stream, bucket or consumer: as
// conflicts, or, when updating and every one can be changed in place, as applied by
// apply.
func (p *provisioner) resolve(diffs []Difference, apply func() error) error {
	if len(diffs) == 0 {
		return nil
	}
	if !p.update {
		p.conflicts = append(p.conflicts, diffs...)
		return nil
	}
	if fixed := fixedDiffs(diffs); len(fixed) > 0 {
		p.conflicts = append(p.conflicts, fixed...)
		return nil
	}
	if err := apply(); err != nil {
		return err
	}
	p.applied = append(p.applied, diffs...)
	return nil
}

// stream creates sc, or compares it with the existing stream. A stream another process
// created between the look-up and the create is looked up again and compared.
func (p *provisioner) stream(ctx context.Context, sc natsjs.StreamConfig) error {
	for try := 0; ; try++ {
		s, err := p.js.Stream(ctx, sc.Name)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			_, err = p.js.CreateStream(ctx, sc)
			if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) && try == 0 {
				continue
			}
			if err != nil {
				return fmt.Errorf("create stream %s: %w", sc.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
		have := s.CachedInfo().Config
		return p.resolve(streamDiff(sc, have), func() error {
			if _, err := p.js.UpdateStream(ctx, mergeStream(sc, have)); err != nil {
				return fmt.Errorf("update stream %s: %w", sc.Name, err)
			}
			return nil
		})
	}
}

// bucket creates kc, or compares it with the stream behind the existing bucket.
func (p *provisioner) bucket(ctx context.Context, kc natsjs.KeyValueConfig) error {
	for try := 0; ; try++ {
		s, err := p.js.Stream(ctx, "KV_"+kc.Bucket)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			_, err = p.js.CreateKeyValue(ctx, kc)
			if (errors.Is(err, natsjs.ErrBucketExists) || errors.Is(err, natsjs.ErrStreamNameAlreadyInUse)) && try == 0 {
				continue
			}
			if err != nil {
				return fmt.Errorf("create bucket %s: %w", kc.Bucket, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("bucket %s: %w", kc.Bucket, err)
		}
		return p.resolve(bucketDiff(kc, s.CachedInfo().Config), func() error {
			if _, err := p.js.UpdateKeyValue(ctx, kc); err != nil {
				return fmt.Errorf("update bucket %s: %w", kc.Bucket, err)
			}
			return nil
		})
	}
}

// objectStore creates the objects bucket's stream sc, or compares it with the existing
// one. An existing bucket that allows roll-ups (every bucket made before this version,
// as nats.go makes object stores) is a pending upgrade, not a conflict: clients of
// earlier versions store objects with a roll-up, which the upgraded bucket refuses, so
// it is applied with the update of existing streams once every client is of this
// version (docs/operations.md, "Upgrading"); until then the processes start and say so.
func (p *provisioner) objectStore(ctx context.Context, sc natsjs.StreamConfig) error {
	for try := 0; ; try++ {
		s, err := p.js.Stream(ctx, sc.Name)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			_, err = p.js.CreateStream(ctx, sc)
			if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) && try == 0 {
				continue
			}
			if err != nil {
				return fmt.Errorf("create object store %s: %w", sc.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("object store %s: %w", sc.Name, err)
		}
		have := s.CachedInfo().Config
		diffs := objectStoreDiff(sc, have)
		var rollup []Difference
		if have.AllowRollup {
			rollup = []Difference{{Kind: "object store", Name: strings.TrimPrefix(sc.Name, "OBJ_"), Setting: "allow_rollup", Existing: "true", Wanted: "false"}}
			if !p.update {
				p.upgrades = append(p.upgrades, rollup...)
			}
		}
		if !p.update && len(diffs) == 0 {
			return nil
		}
		if p.update {
			diffs = append(diffs, rollup...)
		}
		return p.resolve(diffs, func() error {
			// Only what objectStoreDiff compares changes, and roll-ups go: an operator's
			// other settings (placement, a byte limit where no quota sets one) stay.
			m := have
			m.MaxAge, m.Replicas, m.AllowRollup = sc.MaxAge, sc.Replicas, false
			if sc.MaxBytes > 0 {
				m.MaxBytes, m.Discard = sc.MaxBytes, natsjs.DiscardNew
			}
			if _, err := p.js.UpdateStream(ctx, m); err != nil {
				return fmt.Errorf("update object store %s: %w", sc.Name, err)
			}
			return nil
		})
	}
}

// consumer creates the durable cc on stream, or compares it with the existing one.
func (p *provisioner) consumer(ctx context.Context, sc streamConsumer) error {
	stream, cc := sc.stream, sc.cfg
	for try := 0; ; try++ {
		c, err := p.js.Consumer(ctx, stream, cc.Durable)
		if errors.Is(err, natsjs.ErrConsumerNotFound) {
			_, err = p.js.CreateConsumer(ctx, stream, cc)
			if errors.Is(err, natsjs.ErrConsumerExists) && try == 0 {
				continue
			}
			if err != nil {
				return fmt.Errorf("create consumer %s on %s: %w", cc.Durable, stream, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("consumer %s on %s: %w", cc.Durable, stream, err)
		}
		have := c.CachedInfo().Config
		if sc.keepsExplicit && have.AckPolicy == natsjs.AckExplicitPolicy {
			cc.AckPolicy = have.AckPolicy
		}
		return p.resolve(consumerDiff(stream, cc, have), func() error {
			if _, err := p.js.UpdateConsumer(ctx, stream, mergeConsumer(cc, have)); err != nil {
				return fmt.Errorf("update consumer %s on %s: %w", cc.Durable, stream, err)
			}
			return nil
		})
	}
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
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncTimeout(PublishAsyncTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream context: %w", err)
	}
	results, err := js.KeyValue(ctx, cfg.ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s (is a compactor serving this NATS?): %w", cfg.ResultsBucket, err)
	}
	return newStore(nc, js, cfg, results)
}
