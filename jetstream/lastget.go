package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/compactor/compactor/schemas"
)

// MaxCoalesced bounds how many subjects one coalesced read asks for. The server answers
// a multi_last request with at most 1,024 messages and refuses one that matches more
// (413 Too Many Results); a batch of this size also keeps one slow answer from holding
// up too many readers.
const MaxCoalesced = 256

// lastReads coalesces the reads of the last message of single subjects of one stream:
// readers queue a subject and wait; one batched direct get with multi_last at a time
// asks for every subject queued, and the next takes everyone who queued meanwhile. Many
// handlers that each need one key of a bucket then cost the server one request, not
// one each. The answers may come from any replica (see FirstSight).
type lastReads struct {
	s      *Store
	stream string

	// maxBytes, when set, is the max_bytes of the requests (the server's max pending
	// otherwise); a test makes the server stop after each answer.
	maxBytes int

	mu      sync.Mutex
	queue   []*lastRead
	running bool // a goroutine sends the batches
}

// lastRead is one reader's subject and, once done is closed, its answer: msg nil when
// the subject has no message.
type lastRead struct {
	subject string
	done    chan struct{}
	msg     *StoredMsg
	err     error
}

// coalescedTimeout bounds one batch: it answers many readers, so it runs on a context
// of its own, not on any one reader's.
const coalescedTimeout = 10 * time.Second

// queueRead asks for the last message of subject; wait returns it.
func (l *lastReads) queueRead(subject string) *lastRead {
	r := &lastRead{subject: subject, done: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, r)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
	return r
}

// wait returns the last message of the read's subject, nil when there is none. A
// reader whose ctx ends returns at once; the batch it was part of goes on for the
// others.
func (r *lastRead) wait(ctx context.Context) (*StoredMsg, error) {
	subject := r.subject
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read the last message of %s: %w", subject, err)
	}
	select {
	case <-r.done:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read the last message of %s: %w", subject, ctx.Err())
	}
}

// run sends batches until nobody waits.
func (l *lastReads) run() {
	for {
		l.mu.Lock()
		n := min(len(l.queue), MaxCoalesced)
		if n == 0 {
			l.queue, l.running = nil, false
			l.mu.Unlock()
			return
		}
		batch := l.queue[:n:n]
		l.queue = l.queue[n:]
		l.mu.Unlock()
		l.answer(batch)
	}
}

// answer reads the batch's subjects and hands every reader its answer, or the batch's
// error.
func (l *lastReads) answer(batch []*lastRead) {
	ctx, cancel := context.WithTimeout(context.Background(), coalescedTimeout)
	defer cancel()
	bySubject := make(map[string][]*lastRead, len(batch))
	for _, r := range batch {
		bySubject[r.subject] = append(bySubject[r.subject], r)
	}
	var err error
	for len(bySubject) > 0 {
		subjects := make([]string, 0, len(bySubject))
		for subj := range bySubject {
			subjects = append(subjects, subj)
		}
		// Each subject has at most one answer, so batch is no bound of its own; the
		// server may still stop early at its max bytes (then more is set and the
		// subjects not answered yet are asked again). A 404 means none of the subjects
		// has a message: they are answered nil below.
		var msgs []StoredMsg
		var more bool
		req := map[string]any{"multi_last": subjects, "batch": len(subjects)}
		if l.maxBytes > 0 {
			req["max_bytes"] = l.maxBytes
		}
		msgs, more, err = l.s.directRequest(ctx, l.stream, req, fmt.Sprintf("%d subjects of %s", len(subjects), l.stream))
		if err != nil {
			break
		}
		answered := 0
		for i := range msgs {
			m := &msgs[i]
			rs, ok := bySubject[m.Subject]
			if !ok {
				continue // not asked for (a hostile answer): ignored
			}
			delete(bySubject, m.Subject)
			answered++
			for _, r := range rs {
				r.msg = m
				close(r.done)
			}
		}
		if !more {
			break
		}
		if answered == 0 {
			err = errors.New("direct get of the last messages: the server said more were pending but sent none")
			break
		}
	}
	for _, rs := range bySubject {
		for _, r := range rs {
			r.err = err // nil: the subject has no message
			close(r.done)
		}
	}
}

// FirstSight returns a conversation's tombstone (nil when it was not forgotten) and
// value (nil when it has none, with its revision otherwise), as a reader that meets
// the conversation for the first time needs them. Both are read with batched direct
// gets shared with the other conversations read at the same moment, from whichever
// replica answers: they may be older than the last acknowledged writes. A caller must
// only use them where an older value or a missed tombstone errs on the safe side (the
// trigger: it over-counts a new conversation, and a request it makes is checked
// against the stream leader by itself and by the worker). Otherwise use Forgotten and
// Get(ctx, conv, true).
func (rs *Results) FirstSight(ctx context.Context, conv string) (*schemas.Tombstone, *schemas.Result, uint64, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, nil, 0, err
	}
	tr := rs.lastForget.queueRead("$KV." + rs.cfg.ForgetBucket + "." + schemas.ForgetKey(conv))
	vr := rs.lastResults.queueRead("$KV." + rs.cfg.ResultsBucket + "." + conv)
	tm, err := tr.wait(ctx)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read the tombstone of %s: %w", conv, err)
	}
	vm, err := vr.wait(ctx)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read the value of %s: %w", conv, err)
	}
	var tomb *schemas.Tombstone
	if m := tm; m != nil && !kvDeleted(m) {
		tomb = new(schemas.Tombstone)
		if err := json.Unmarshal(m.Data, tomb); err != nil {
			return nil, nil, 0, fmt.Errorf("the tombstone of %s does not decode: %w", conv, err)
		}
	}
	if vm == nil || kvDeleted(vm) {
		return tomb, nil, 0, nil
	}
	v, err := decodeResultOf(conv, vm.Data)
	if err != nil {
		return nil, nil, 0, err
	}
	return tomb, v, vm.Seq, nil
}

// kvDeleted reports whether a bucket's message is a delete or purge marker.
func kvDeleted(m *StoredMsg) bool {
	op := m.Header.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}
