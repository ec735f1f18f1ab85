package pipeline

import (
	"container/list"
	"context"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// Client publishes chat events, reads compacted context and asks for compactions. It is
// safe for concurrent use.
type Client struct {
	nc    *nats.Conn // the compactor service's requests
	store *jetstream.Store

	mu    sync.Mutex
	calls map[string]*list.Element // conversation → its open tool calls
	lru   *list.List

	async asyncQueue // PublishAsync's publishes in flight

	svc *viaService // set in service mode (ViaService): store is nil
}

// maxTrackedConversations bounds the client's memory of open tool calls.
const maxTrackedConversations = 10000

type openCalls struct {
	conv     string
	answered map[string]bool // call id → answered
}

// Option configures a Client.
type Option func(*options)

type options struct {
	cfg        jetstream.Config
	provision  bool
	viaService bool
}

// WithConfig uses other stream, subject and bucket names than the contract's defaults.
func WithConfig(cfg jetstream.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithProvision creates the streams, buckets and consumers that are missing at start
// instead of expecting a running compactor to have done it. Existing ones are left as
// they are: when their settings differ from the client's config, New fails naming each
// difference (jetstream.ErrConflict), as a compactor process does.
func WithProvision() Option { return func(o *options) { o.provision = true } }

// New binds a client to a NATS connection. By default it expects the streams and
// buckets to exist (a compactor serving the same NATS creates them); with ViaService it
// opens none and goes through the compactor service.
func New(ctx context.Context, nc *nats.Conn, opts ...Option) (*Client, error) {
	o := options{cfg: jetstream.DefaultConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.viaService {
		return newViaService(nc, o)
	}
	var (
		st  *jetstream.Store
		err error
	)
	if o.provision {
		st, err = jetstream.Provision(ctx, nc, o.cfg)
	} else {
		st, err = jetstream.Open(ctx, nc, o.cfg)
	}
	if err != nil {
		return nil, err
	}
	return NewWithStore(nc, st), nil
}

// NewWithStore returns a client over an existing store; nc carries its requests to the
// compactor service (usually the store's own connection).
func NewWithStore(nc *nats.Conn, st *jetstream.Store) *Client {
	return &Client{nc: nc, store: st, calls: map[string]*list.Element{}, lru: list.New()}
}

// refusable returns ctx, cancelled with the server's refusal (a *jetstream.PermissionError)
// as soon as it refuses, on the client's connection, a publish whose subject is one
// publish accepts, or the subscription to the client's replies. A refused request gets
// no answer: without this the call would wait for its timeout. Pass the call's error
// through jetstream.PermissionCause.
func (c *Client) refusable(ctx context.Context, publish func(subject string) bool) (context.Context, context.CancelFunc) {
	inbox := strings.TrimSuffix(c.nc.Opts.InboxPrefix, ".")
	if inbox == "" {
		inbox = strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	return jetstream.RefusedContext(ctx, c.nc, func(pe *jetstream.PermissionError) bool {
		if pe.Op == "subscribe" {
			return strings.HasPrefix(pe.Subject, inbox+".")
		}
		return publish(pe.Subject)
	})
}

// readable returns ctx, cancelled with the server's refusal of a read of one of streams
// (a direct or leader get, with or without a subject after the stream's name) or of the
// client's replies, and done, which releases the watch and turns the read's error into
// that refusal: a refused get gets no answer, and without it the read would wait for
// its timeout. Only gets of streams count, so a refusal of another call on the same
// connection does not end this read.
func (c *Client) readable(ctx context.Context, streams ...string) (context.Context, func(error) error) {
	rctx, cancel := c.refusable(ctx, func(s string) bool {
		for _, api := range []string{"$JS.API.DIRECT.GET.", "$JS.API.STREAM.MSG.GET."} {
			if rest, ok := strings.CutPrefix(s, api); ok {
				for _, st := range streams {
					if rest == st || strings.HasPrefix(rest, st+".") {
						return true
					}
				}
			}
		}
		return false
	})
	return rctx, func(err error) error {
		err = jetstream.PermissionCause(rctx, err)
		cancel()
		return err
	}
}

// conversationStreams are the streams a read of a conversation gets from: CHAT, the
// results and forget buckets', and the objects bucket's.
func (c *Client) conversationStreams() []string {
	cfg := c.config()
	return []string{cfg.ChatStream, "KV_" + cfg.ResultsBucket, "KV_" + cfg.ForgetBucket, "OBJ_" + cfg.ObjectsBucket}
}

// liveValue reads conv's value as Context may serve it: a value the conversation's
// forget tombstone covers is dropped (a forget that a writer outlived), and from is
// where the tail starts: the value's TailStartSeq, never at or below what the forget
// deleted.
func (c *Client) liveValue(ctx context.Context, conv string, leader bool) (v *schemas.Result, from uint64, err error) {
	v, _, tomb, err := c.store.Results().Live(ctx, conv, leader)
	if err != nil {
		return nil, 0, err
	}
	return v, tailFrom(v, tomb), nil
}

// tailFrom is the first sequence of the tail read with value v: its tail start, and
// never a sequence the tombstone covers.
func tailFrom(v *schemas.Result, tomb *schemas.Tombstone) uint64 {
	from := uint64(1)
	if v != nil && v.TailStartSeq > 0 {
		from = v.TailStartSeq
	}
	if tomb != nil && from <= tomb.ThroughSeq {
		from = tomb.ThroughSeq + 1
	}
	return from
}
