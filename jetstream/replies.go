package jetstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// replies routes the answers of batched direct gets to the reads waiting for them. A
// read used to subscribe to an inbox of its own, and a synchronous subscription comes
// with a channel of 65,536 slots (512 KiB): a new conversation's rebuild cost more in
// garbage collection than in NATS. Instead one wildcard subscription per store, on an
// inbox of the connection (so the connection's custom inbox prefix, which roles'
// permissions name, is kept), serves every read; each read has a token of its own.
//
// The subscription's callback never blocks: answers are appended to the read's list,
// however slow the reader, so one read never holds up another's answers. An answer whose
// token no read holds (a late one, or a stranger's) is dropped.
type replies struct {
	nc *nats.Conn

	mu     sync.Mutex
	sub    *nats.Subscription // made with the store; made again if it broke
	prefix string             // the subscription's inbox, ending in "."
	next   uint64
	reads  map[string]*pendingRead
}

// pendingRead is one read's share of the answers.
type pendingRead struct {
	mu    sync.Mutex
	msgs  []*nats.Msg
	ready chan struct{} // one slot: a signal that msgs grew
}

// errRepliesClosed is the error of a read on a store whose connection is closed.
var errRepliesClosed = errors.New("connection closed")

// newStore returns a store with its reply subscription made, so the store's
// subscriptions are all there from the start (a component that counts the connection's
// subscriptions before and after its run sees none of the store's come or go).
func newStore(nc *nats.Conn, js natsjs.JetStream, cfg Config, results natsjs.KeyValue) (*Store, error) {
	st := &Store{core: core{nc: nc, js: js, cfg: cfg, resultsKV: results, replies: replies{nc: nc}}}
	st.bindHandles()
	st.lastForget = lastReads{s: st, stream: "KV_" + cfg.ForgetBucket}
	st.lastResults = lastReads{s: st, stream: "KV_" + cfg.ResultsBucket}
	st.replies.mu.Lock()
	defer st.replies.mu.Unlock()
	if err := st.replies.subscribe(); err != nil {
		return nil, fmt.Errorf("subscribe to the replies of direct gets: %w", err)
	}
	return st, nil
}

// subscribe makes the reply subscription. Callers hold r.mu.
func (r *replies) subscribe() error {
	if r.nc.IsClosed() {
		return errRepliesClosed
	}
	prefix := r.nc.NewInbox() + "."
	sub, err := r.nc.Subscribe(prefix+"*", r.deliver)
	if err != nil {
		return err
	}
	// Every read of the store shares this subscription, and its callback never blocks:
	// the default pending limits would turn a burst of answers into a slow-consumer
	// drop that stalls every read until its deadline.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	r.sub, r.prefix, r.reads = sub, prefix, map[string]*pendingRead{}
	return nil
}

// open returns a fresh reply subject and the read that collects its answers; done
// must be called when the read is over.
func (r *replies) open() (subject string, pr *pendingRead, done func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil || !r.sub.IsValid() {
		if err := r.subscribe(); err != nil {
			return "", nil, nil, err
		}
	}
	r.next++
	token := strconv.FormatUint(r.next, 36)
	pr = &pendingRead{ready: make(chan struct{}, 1)}
	r.reads[token] = pr
	reads := r.reads
	return r.prefix + token, pr, func() {
		r.mu.Lock()
		delete(reads, token)
		r.mu.Unlock()
	}, nil
}

// deliver is the subscription's callback.
func (r *replies) deliver(m *nats.Msg) {
	r.mu.Lock()
	token, ok := strings.CutPrefix(m.Subject, r.prefix)
	pr := r.reads[token]
	r.mu.Unlock()
	if !ok {
		return // the subscription was replaced: its reads are over
	}
	if pr == nil {
		return
	}
	pr.mu.Lock()
	pr.msgs = append(pr.msgs, m)
	pr.mu.Unlock()
	select {
	case pr.ready <- struct{}{}:
	default:
	}
}

// take returns the answers that arrived since the last take (nil when none).
func (pr *pendingRead) take() []*nats.Msg {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	msgs := pr.msgs
	pr.msgs = nil
	return msgs
}
