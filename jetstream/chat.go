package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Chat is the handle on CHAT, the conversations' messages: it publishes them, reads a
// conversation back (batched direct gets, or from the stream leader), lists and pages
// the conversations for the view, and runs the trigger's consumers on it. Store.Chat
// returns it.
type Chat struct{ *core }

// ErrMissingMessage is the error of a pinned entry whose message is no longer in CHAT
// (it left by age, a purge or a delete) or belongs to another conversation. Readers skip
// and report such an entry, like any invalid one.
var ErrMissingMessage = errors.New("message is not in the conversation's history")

// Publish stores one encoded chat message and returns its CHAT sequence. A
// non-empty msgID sets Nats-Msg-Id, so a retried publish is stored once; the duplicate's
// ack carries the first copy's sequence. An id the stream had for another message is an
// error matching ErrDuplicate (see CheckDuplicate).
func (ch *Chat) Publish(ctx context.Context, conv string, data []byte, msgID string) (uint64, error) {
	return ch.PublishWith(ctx, conv, data, msgID, TraceHeader{})
}

// TraceHeader is the W3C trace context (traceparent, tracestate) a chat message carries
// to the trigger, which links the compaction it leads to with it. Zero: none.
type TraceHeader struct {
	Parent, State string
}

// PublishWith is Publish with the trace context tr on the message.
func (ch *Chat) PublishWith(ctx context.Context, conv string, data []byte, msgID string, tr TraceHeader) (uint64, error) {
	m, err := ch.chatMsg(conv, data, msgID, tr)
	if err != nil {
		return 0, err
	}
	ack, err := ch.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	if ack.Duplicate {
		if err := ch.CheckDuplicate(ctx, conv, data, msgID, ack.Sequence); err != nil {
			return 0, err
		}
	}
	return ack.Sequence, nil
}

// expectedLastSubjSeqSubjectHeader names the subject (a wildcard may) whose newest
// message Nats-Expected-Last-Subject-Sequence is checked against (nats-server 2.11+).
const expectedLastSubjSeqSubjectHeader = "Nats-Expected-Last-Subject-Sequence-Subject"

// ErrWrongLastSeq is the error of a publish that expected another newest message of
// its conversation (PublishExpecting): another writer stored one meanwhile, and
// nothing was stored.
var ErrWrongLastSeq = errors.New("the conversation's newest message is not the one expected")

// PublishExpecting is PublishWith, stored only when the conversation's newest message
// is at sequence lastSeq (0: when the conversation has none), in any layout, with
// Nats-Expected-Last-Subject-Sequence over the conversation's filter: otherwise an error matching ErrWrongLastSeq, and
// nothing is stored. The server checks the expectation before msgID: a retry of a
// message already stored, with the expectation it was first sent with, fails the same
// way (read the conversation to tell a retry from another writer's message).
func (ch *Chat) PublishExpecting(ctx context.Context, conv string, data []byte, msgID string, tr TraceHeader, lastSeq uint64) (uint64, error) {
	m, err := ch.chatMsg(conv, data, msgID, tr)
	if err != nil {
		return 0, err
	}
	h := make(nats.Header, len(m.Header)+1) // the header may be shared: a copy
	for k, v := range m.Header {
		h[k] = v
	}
	h.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(lastSeq, 10))
	// Checked against every layout of the conversation's messages (ChatFilter), not the
	// subject the stream's transform stores this one on: after a change of the
	// trigger's partitions that subject holds none of them yet.
	filter, err := ch.cfg.ChatFilter(conv)
	if err != nil {
		return 0, err
	}
	h.Set(expectedLastSubjSeqSubjectHeader, filter)
	m.Header = h
	ack, err := ch.js.PublishMsg(ctx, m)
	if err != nil {
		if isWrongLastSequence(err) {
			return 0, fmt.Errorf("publish to %s: %w (expected sequence %d): %v", m.Subject, ErrWrongLastSeq, lastSeq, err)
		}
		return 0, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	if ack.Duplicate {
		if err := ch.CheckDuplicate(ctx, conv, data, msgID, ack.Sequence); err != nil {
			return 0, err
		}
	}
	return ack.Sequence, nil
}

// PublishAsyncTimeout bounds how long an asynchronous publish waits for its ack; after
// it the publish fails with a timeout (it may still have been stored: retry with the
// same message id).
const PublishAsyncTimeout = 30 * time.Second

// PubAckFuture is the outcome of an asynchronous publish.
type PubAckFuture = natsjs.PubAckFuture

// PublishAsyncStallWait is how long an asynchronous publish waits for room when the
// connection's publishes in flight are at their limit (nats.go's 4000 by default):
// the producer is held back until the server acknowledges earlier ones, as a
// synchronous publish would be. A server that syncs every write acknowledges a burst
// more slowly than it arrives; nats.go's own 200 ms would fail the burst instead. Every
// publish in flight resolves within PublishAsyncTimeout, so room comes within it.
const PublishAsyncStallWait = PublishAsyncTimeout

// ErrPublishStalled is matched by the error of an asynchronous publish that found no
// room within PublishAsyncStallWait: none of the connection's publishes in flight was
// acknowledged (or timed out) meanwhile.
var ErrPublishStalled = natsjs.ErrTooManyStalledMsgs

// PublishAsync is Publish without waiting for the ack. The future always
// resolves: with the ack, an error, or a timeout after PublishAsyncTimeout (also when
// the connection closes meanwhile). With the connection's publishes in flight at their
// limit, it waits for room up to PublishAsyncStallWait, then fails with an error
// matching ErrPublishStalled. The header of the future's Msg may be shared with
// other publishes: read it, never change it.
func (ch *Chat) PublishAsync(conv string, data []byte, msgID string) (PubAckFuture, error) {
	return ch.PublishAsyncWith(conv, data, msgID, TraceHeader{})
}

// PublishAsyncWith is PublishAsync with the trace context tr on the message.
func (ch *Chat) PublishAsyncWith(conv string, data []byte, msgID string, tr TraceHeader) (PubAckFuture, error) {
	m, err := ch.chatMsg(conv, data, msgID, tr)
	if err != nil {
		return nil, err
	}
	// The stall wait sets no header: the shared one above is only read.
	f, err := ch.js.PublishMsgAsync(m, natsjs.WithStallWait(PublishAsyncStallWait))
	if errors.Is(err, natsjs.ErrTooManyStalledMsgs) {
		return nil, fmt.Errorf("publish to %s: %d publishes in flight and none acknowledged within %s (is the server reachable, "+
			"and its disk keeping up?): %w", m.Subject, ch.js.PublishAsyncPending(), PublishAsyncStallWait, err)
	}
	if err != nil {
		return nil, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return f, nil
}

// chatMsg is the message a publish to conv sends: on the conversation's subject, with
// Nats-Expected-Stream naming CHAT (a subject some other stream captured refuses the
// message instead of storing it there) and, for a non-empty msgID, Nats-Msg-Id. The
// headers are set here, once, instead of through publish options: a message without an
// id shares one read-only header per stream, so a publish builds no header. A trace
// context that would break the header block is left out.
func (ch *Chat) chatMsg(conv string, data []byte, msgID string, tr TraceHeader) (*nats.Msg, error) {
	subj, err := ch.cfg.ChatSubject(conv)
	if err != nil {
		return nil, err
	}
	stream := expectStream(ch.cfg.ChatStream)
	h := stream.header
	traced := tr.Parent != "" && checkHeader("traceparent", tr.Parent) == nil &&
		(tr.State == "" || checkHeader("tracestate", tr.State) == nil)
	if msgID != "" || traced {
		h = nats.Header{natsjs.ExpectedStreamHeader: stream.value}
		if msgID != "" {
			h[natsjs.MsgIDHeader] = []string{msgID}
		}
		if traced {
			h["traceparent"] = []string{tr.Parent}
			if tr.State != "" {
				h["tracestate"] = []string{tr.State}
			}
		}
	}
	return &nats.Msg{Subject: subj, Data: data, Header: h}, nil
}

// streamHeader is the Nats-Expected-Stream header of one stream, shared by every
// publish to it: no one writes to it after expectStream made it (nats.go and its
// retries only read a message's header when none of the publish options is given).
type streamHeader struct {
	value  []string
	header nats.Header
}

// expectHeaders maps a stream's name to its *streamHeader.
var expectHeaders sync.Map

func expectStream(name string) *streamHeader {
	if h, ok := expectHeaders.Load(name); ok {
		return h.(*streamHeader)
	}
	v := []string{name}
	h, _ := expectHeaders.LoadOrStore(name, &streamHeader{value: v, header: nats.Header{natsjs.ExpectedStreamHeader: v}})
	return h.(*streamHeader)
}

// PublishAsyncPending is how many asynchronous publishes wait for their acks.
func (ch *Chat) PublishAsyncPending() int { return ch.js.PublishAsyncPending() }

// PublishAsyncComplete is closed when every async publish has been acked.
func (ch *Chat) PublishAsyncComplete() <-chan struct{} { return ch.js.PublishAsyncComplete() }

// DirectBatchSize is how many messages one batched direct get asks for.
const DirectBatchSize = 256

// Load reads a conversation's messages with sequence in [fromSeq, upToSeq]
// (upToSeq 0: to the end) using batched direct gets, paging from the last returned
// sequence + 1. Any replica may answer a direct get; use LoadLeader when a
// read must see the newest writes. Messages that left the stream are simply not there.
func (ch *Chat) Load(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]StoredMsg, error) {
	msgs, _, _, err := ch.loadConversation(ctx, conv, fromSeq, upToSeq)
	return msgs, err
}

// loadConversation is Chat.Load; past reports that the answer held a message of
// the conversation after upToSeq, and layouts how many subjects (partition layouts) it
// read: the answers for two subjects may come from two replicas, one further behind
// than the other, so a message past upToSeq on one says nothing of the other's.
func (s *core) loadConversation(ctx context.Context, conv string, fromSeq, upToSeq uint64) (out []StoredMsg, past bool, layouts int, err error) {
	if fromSeq == 0 {
		fromSeq = 1
	}
	subjects, err := s.chatSubjects(ctx, conv, fromSeq)
	if err != nil {
		return nil, false, 0, err
	}
	for _, sub := range subjects {
		msgs, p, err := s.loadSubject(ctx, sub.name, fromSeq, upToSeq, sub.last)
		if err != nil {
			return nil, false, 0, err
		}
		out, past = append(out, msgs...), past || p
	}
	if len(subjects) > 1 {
		slices.SortFunc(out, func(a, b StoredMsg) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return out, past, len(subjects), nil
}

// chatSubjects returns the subjects conversation conv has messages on at or after
// fromSeq: one per partition layout that holds any (two only while the partition count
// changes), none when it has none. It asks with one batched direct get of the last
// message of each subject under chat.<conv>.>, which the server answers from its
// subject index. Reading each subject by its literal name matters: a read of the
// wildcard from a later sequence makes the server scan every block in between once
// the stream holds 64Ki subjects (about 50x slower at 100,000 conversations).
func (s *core) chatSubjects(ctx context.Context, conv string, fromSeq uint64) ([]chatSubject, error) {
	filter, err := s.cfg.ChatFilter(conv)
	if err != nil {
		return nil, err
	}
	lasts, _, err := s.directRequest(ctx, s.cfg.ChatStream, map[string]any{"multi_last": []string{filter}, "batch": DirectBatchSize}, filter)
	if err != nil {
		return nil, err
	}
	var out []chatSubject
	for _, m := range lasts {
		if m.Seq < fromSeq {
			continue // nothing on it from fromSeq on
		}
		if c, ok := s.cfg.ConversationOf(m.Subject); !ok || c != conv {
			return nil, fmt.Errorf("direct get %s: answered with subject %q", filter, m.Subject)
		}
		if !slices.ContainsFunc(out, func(c chatSubject) bool { return c.name == m.Subject }) {
			out = append(out, chatSubject{name: m.Subject, last: m.Seq})
		}
	}
	return out, nil
}

// chatSubject is a subject a conversation's messages are stored on, with the sequence
// of its last message (as the server that answered knew it).
type chatSubject struct {
	name string
	last uint64
}

// loadSubject reads the messages on one literal subject from fromSeq through upToSeq (0:
// all); past reports that the answer held a message after upToSeq. last is the subject's
// last sequence as chatSubjects saw it.
//
// A batch goes on past upToSeq (the server has no bound for it), and each message of a
// conversation costs the server a walk over the messages of others stored in between.
// So when the subject holds messages past upToSeq, the batches start at one message and
// grow: a conversation's first message, read through the sequence before it (a trigger's
// first sight), costs one message, not a batch of them.
func (s *core) loadSubject(ctx context.Context, subj string, fromSeq, upToSeq, last uint64) (out []StoredMsg, past bool, err error) {
	batch := DirectBatchSize
	if upToSeq > 0 && last > upToSeq {
		batch = 1
	}
	for {
		page, more, err := s.directBatch(ctx, s.cfg.ChatStream, subj, fromSeq, batch)
		if err != nil {
			return nil, false, err
		}
		for _, m := range page {
			if upToSeq > 0 && m.Seq > upToSeq {
				return out, true, nil
			}
			out = append(out, m)
		}
		if !more || len(page) == 0 {
			return out, false, nil
		}
		fromSeq = page[len(page)-1].Seq + 1
		batch = min(batch*4, DirectBatchSize)
	}
}

// LoadEntries is Load decoded into entries.
func (ch *Chat) LoadEntries(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]schemas.Entry, error) {
	msgs, err := ch.Load(ctx, conv, fromSeq, upToSeq)
	if err != nil {
		return nil, err
	}
	return entries(msgs), nil
}

// entries decodes stored chat messages.
func entries(msgs []StoredMsg) []schemas.Entry {
	es := make([]schemas.Entry, len(msgs))
	for i, m := range msgs {
		es[i] = m.Entry()
	}
	return es
}

// LoadEntriesThrough is LoadEntries for [fromSeq, through], where through is a sequence
// the caller knows the stream has (a message just delivered, or the newest the leader
// reported). A direct get may be answered by a replica that lags behind; when the
// answer stops short of through, the rest is read from the stream leader, so the
// entries are never fewer than what the stream held at through.
func (ch *Chat) LoadEntriesThrough(ctx context.Context, conv string, fromSeq, through uint64) ([]schemas.Entry, error) {
	msgs, err := ch.loadThrough(ctx, conv, fromSeq, through)
	if err != nil {
		return nil, err
	}
	return entries(msgs), nil
}

// loadThrough is LoadEntriesThrough's read: batched direct gets of the conversation's
// literal subjects, then the stream leader for what the answer lacked before through.
func (ch *Chat) loadThrough(ctx context.Context, conv string, fromSeq, through uint64) ([]StoredMsg, error) {
	msgs, past, layouts, err := ch.loadConversation(ctx, conv, fromSeq, through)
	if err != nil {
		return nil, err
	}
	next := max(fromSeq, 1)
	switch n := len(msgs); {
	case layouts > 1:
		// On two layouts (a partition change), each subject's answer may have come from
		// another replica: a message of one says nothing of what the other lacks before
		// it. The leader is asked for the whole range (rare, and bounded by through).
		msgs, past = nil, false
	case n > 0:
		next = msgs[n-1].Seq + 1
	}
	// A server that answered with a message after through holds the stream up to it (a
	// replica applies the stream in order): nothing is missing, the leader is not asked.
	// That is the common case of a new conversation, whose read from 1 finds the message
	// just delivered.
	if next <= through && !past {
		rest, err := ch.leaderTail(ctx, conv, next, through)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, rest...)
	}
	return msgs, nil
}

// LoadLeader is Load as the stream leader has it: it sees every acknowledged write
// (read-your-writes). It asks the leader for the conversation's newest message (one
// request, answered from the subject index), reads up to it with the batched direct
// gets of Load, and asks the leader, one message a request, only for what that answer
// lacked (a replica that had not yet applied the newest writes): not the whole range
// message by message.
func (ch *Chat) LoadLeader(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]StoredMsg, error) {
	last, err := ch.LastSeq(ctx, conv)
	if err != nil {
		return nil, err
	}
	end := last
	if upToSeq > 0 {
		end = min(end, upToSeq)
	}
	if end == 0 || end < max(fromSeq, 1) {
		return nil, nil
	}
	return ch.loadThrough(ctx, conv, fromSeq, end)
}

// leaderTail reads conv's messages in [fromSeq, upToSeq] (upToSeq 0: to the end) from
// the stream leader, one message per request. Each request filters on the
// conversation's wildcard (its messages may be on two partition layouts), which the
// server answers by walking its blocks from fromSeq: callers ask only for a recent
// tail.
func (ch *Chat) leaderTail(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]StoredMsg, error) {
	subj, err := ch.cfg.ChatFilter(conv)
	if err != nil {
		return nil, err
	}
	if fromSeq == 0 {
		fromSeq = 1
	}
	var out []StoredMsg
	for upToSeq == 0 || fromSeq <= upToSeq {
		m, err := ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"seq": fromSeq, "next_by_subj": subj})
		if errors.Is(err, errNoMessage) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if upToSeq > 0 && m.Seq > upToSeq {
			return out, nil
		}
		out = append(out, m)
		fromSeq = m.Seq + 1
	}
	return out, nil
}

// eachPage calls fn with conv's messages in [fromSeq, through] (through 0: to the end),
// a batched direct get of one literal subject at a time (see chatSubjects): in the
// order of each subject, not across subjects. fn returns false to stop.
func (s *core) eachPage(ctx context.Context, conv string, fromSeq, through uint64, fn func([]StoredMsg) bool) error {
	fromSeq = max(fromSeq, 1)
	subjects, err := s.chatSubjects(ctx, conv, fromSeq)
	if err != nil {
		return err
	}
	for _, sub := range subjects {
		for from := fromSeq; through == 0 || from <= through; {
			page, more, err := s.directBatch(ctx, s.cfg.ChatStream, sub.name, from, DirectBatchSize)
			if err != nil {
				return err
			}
			i := len(page)
			if through > 0 {
				i, _ = slices.BinarySearchFunc(page, through+1, func(m StoredMsg, seq uint64) int { return cmp.Compare(m.Seq, seq) })
			}
			if i > 0 && !fn(page[:i]) {
				return nil
			}
			if !more || len(page) == 0 || i < len(page) {
				break
			}
			from = page[len(page)-1].Seq + 1
		}
	}
	return nil
}

// LoadPinned reads the messages at seqs (a value's pinned_seqs) of conversation conv,
// as entries, with one direct get of each sequence (no subject filter: the server looks
// the sequence up). A message that is no longer in CHAT (the stream leader confirms it),
// or that belongs to another conversation, gives an entry whose Err matches
// ErrMissingMessage: readers skip and report it instead of failing the whole read. Any
// other failure is an error.
func (ch *Chat) LoadPinned(ctx context.Context, conv string, seqs []uint64) ([]schemas.Entry, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	ours := func(m StoredMsg) bool { c, ok := ch.cfg.ConversationOf(m.Subject); return ok && c == conv }
	out := make([]schemas.Entry, 0, len(seqs))
	for _, seq := range seqs {
		if seq == 0 {
			out = append(out, schemas.Entry{Seq: seq, Err: fmt.Errorf("pinned sequence 0: %w", ErrMissingMessage)})
			continue
		}
		m, err := ch.directSeq(ctx, ch.cfg.ChatStream, seq)
		if err != nil && !errors.Is(err, errNoMessage) {
			return nil, fmt.Errorf("load pinned message %d: %w", seq, err)
		}
		if err == nil && m.Seq == seq && ours(m) {
			out = append(out, m.Entry())
			continue
		}
		// A replica may lag or lose a message it should have: only the stream leader
		// says a pinned message is gone.
		m, err = ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"seq": seq})
		switch {
		case err == nil && m.Seq == seq && ours(m):
			out = append(out, m.Entry())
		case err == nil || errors.Is(err, errNoMessage):
			out = append(out, schemas.Entry{Seq: seq, Err: fmt.Errorf("pinned message %d: %w", seq, ErrMissingMessage)})
		default:
			return nil, fmt.Errorf("load pinned message %d: %w", seq, err)
		}
	}
	return out, nil
}

// directSeq is a direct get of the message at seq (any replica answers); errNoMessage
// when the server that answered has none there.
func (s *core) directSeq(ctx context.Context, stream string, seq uint64) (StoredMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	body := fmt.Appendf(nil, `{"seq":%d}`, seq)
	m, err := s.nc.RequestWithContext(ctx, apiPrefix+"DIRECT.GET."+stream, body)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("direct get %d of %s: %w", seq, stream, err)
	}
	if status := m.Header.Get("Status"); status != "" {
		if status == "404" {
			return StoredMsg{}, errNoMessage
		}
		return StoredMsg{}, fmt.Errorf("direct get %d of %s: status %s %s", seq, stream, status, m.Header.Get("Description"))
	}
	return storedFromDirect(m)
}

// LastSeq returns the sequence of a conversation's newest message, 0 when it has none.
func (ch *Chat) LastSeq(ctx context.Context, conv string) (uint64, error) {
	m, _, err := ch.Last(ctx, conv)
	return m.Seq, err
}

// Last returns a conversation's newest message, read from the stream leader; ok is
// false when it has none.
func (ch *Chat) Last(ctx context.Context, conv string) (m StoredMsg, ok bool, err error) {
	subj, err := ch.cfg.ChatFilter(conv)
	if err != nil {
		return StoredMsg{}, false, err
	}
	m, err = ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"last_by_subj": subj})
	if errors.Is(err, errNoMessage) {
		return StoredMsg{}, false, nil
	}
	if err != nil {
		return StoredMsg{}, false, err
	}
	return m, true, nil
}

// FirstSeq returns the sequence of a conversation's oldest message still in CHAT
// (older ones left with the age limit or a purge), 0 when it has none.
func (ch *Chat) FirstSeq(ctx context.Context, conv string) (uint64, error) {
	subj, err := ch.cfg.ChatFilter(conv)
	if err != nil {
		return 0, err
	}
	m, err := ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"seq": 1, "next_by_subj": subj})
	if errors.Is(err, errNoMessage) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}

// StreamFirstSeq is the sequence of CHAT's oldest message, of any conversation, from
// the stream leader (0 when CHAT is empty): every sequence below it left the stream by
// its age limit or a purge of the stream (or was lost with the oldest messages).
func (ch *Chat) StreamFirstSeq(ctx context.Context) (uint64, error) {
	m, err := ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"seq": 1, "next_by_subj": ch.cfg.ChatPrefix + ".>"})
	if errors.Is(err, errNoMessage) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}

// Consume delivers CHAT's messages to the active trigger: every process calls it
// with the same durable consumer and priority group, one is pinned and gets the
// messages, the others stand by and take over when it goes silent. handle settles each
// delivery; onErr hears the consumer's errors (missed heartbeats are not reported).
func (ch *Chat) Consume(ctx context.Context, handle func(*Delivery), onErr func(error)) (*Consumption, error) {
	return ch.ConsumePartition(ctx, Partition{N: 1}, handle, onErr)
}

// consume runs a pull consumer of the trigger's priority group.
func (s *core) consume(ctx context.Context, stream, durable string, convOf func(string) (string, bool),
	handle func(*Delivery), onErr func(error)) (*Consumption, error) {
	c, err := s.js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
	}
	acksAll := c.CachedInfo().Config.AckPolicy == natsjs.AckAllPolicy
	cc, err := c.Consume(func(msg natsjs.Msg) {
		d := s.delivery(msg, convOf)
		d.AcksAll = acksAll
		handle(d)
	},
		natsjs.PullPriorityGroup(s.cfg.TriggerGroup),
		natsjs.PullExpiry(s.cfg.triggerPullExpiry()),
		natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
			if onErr != nil && !errors.Is(err, natsjs.ErrNoHeartbeat) {
				onErr(err)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", stream, err)
	}
	return &Consumption{cc: cc, stop: s.watchConsumer(stream, durable, onErr), acksAll: acksAll}, nil
}

// Consumption is a running consumer.
type Consumption struct {
	cc      natsjs.ConsumeContext
	stop    func() // ends the watch of its refusals
	acksAll bool
}

// AcksAll reports whether the consumer acknowledges all messages up to the one acked
// (its ack policy is all): then Delivery.Ack settles every message the consumer
// delivered before it, and a delivery must not be acknowledged before all those
// delivered before it are settled. The chat trigger consumers Provision creates are so;
// one created before this version acknowledges each message (explicit) and keeps
// doing so, since an ack policy cannot change in place.
func (c *Consumption) AcksAll() bool { return c.acksAll }

// Drain stops taking messages, lets the handler finish those in hand and returns once
// it has.
func (c *Consumption) Drain() {
	c.cc.Drain()
	<-c.cc.Closed()
	if c.stop != nil {
		c.stop()
	}
}

// Subscription is a core NATS subscription of the store's, or a watcher of a shared
// one.
type Subscription struct {
	sub  *nats.Subscription
	stop func()
}

// Stop ends the subscription.
func (s *Subscription) Stop() {
	if s == nil {
		return
	}
	if s.stop != nil {
		s.stop()
	}
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
}
