package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Store is the JetStream side of the contract: CHAT, the work queue, the events, the
// dead letters and the results bucket. It knows subjects and payloads, nothing of how
// triggers decide or how summaries are written.
type Store struct {
	nc      *nats.Conn
	js      natsjs.JetStream
	cfg     Config
	results natsjs.KeyValue
}

// Config returns the store's config.
func (s *Store) Config() Config { return s.cfg }

// Conn returns the NATS connection.
func (s *Store) Conn() *nats.Conn { return s.nc }

// JetStream returns the JetStream context.
func (s *Store) JetStream() natsjs.JetStream { return s.js }

// Results returns the results bucket.
func (s *Store) Results() natsjs.KeyValue { return s.results }

const apiPrefix = "$JS.API."

// PublishMessage stores one encoded chat message and returns its CHAT sequence. A
// non-empty msgID sets Nats-Msg-Id, so a retried publish is stored once; the duplicate's
// ack carries the first copy's sequence.
func (s *Store) PublishMessage(ctx context.Context, conv string, data []byte, msgID string) (uint64, error) {
	var opts []natsjs.PublishOpt
	if msgID != "" {
		opts = append(opts, natsjs.WithMsgID(msgID))
	}
	ack, err := s.js.Publish(ctx, s.cfg.ChatSubject(conv), data, append(opts, natsjs.WithExpectStream(s.cfg.ChatStream))...)
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", s.cfg.ChatSubject(conv), err)
	}
	return ack.Sequence, nil
}

// PublishMessageAsync is PublishMessage without waiting for the ack.
func (s *Store) PublishMessageAsync(conv string, data []byte, msgID string) (natsjs.PubAckFuture, error) {
	opts := []natsjs.PublishOpt{natsjs.WithExpectStream(s.cfg.ChatStream)}
	if msgID != "" {
		opts = append(opts, natsjs.WithMsgID(msgID))
	}
	f, err := s.js.PublishAsync(s.cfg.ChatSubject(conv), data, opts...)
	if err != nil {
		return nil, fmt.Errorf("publish to %s: %w", s.cfg.ChatSubject(conv), err)
	}
	return f, nil
}

// PublishAsyncComplete is closed when every async publish has been acked.
func (s *Store) PublishAsyncComplete() <-chan struct{} { return s.js.PublishAsyncComplete() }

// StoredMsg is a message read back from a stream.
type StoredMsg struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Header  nats.Header
	Data    []byte
}

// Entry decodes a stored chat message; a payload that breaks the contract gives an
// entry with Err set.
func (m StoredMsg) Entry() schemas.Entry {
	e := schemas.Entry{Seq: m.Seq, Time: m.Time}
	msg, err := schemas.DecodeMessage(m.Data)
	if err != nil {
		e.Err = err
		return e
	}
	e.Message = msg
	return e
}

// DirectBatchSize is how many messages one batched direct get asks for.
const DirectBatchSize = 256

// LoadConversation reads a conversation's messages with sequence in [fromSeq, upToSeq]
// (upToSeq 0: to the end) using batched direct gets, paging from the last returned
// sequence + 1. Any replica may answer a direct get; use LoadConversationLeader when a
// read must see the newest writes.
func (s *Store) LoadConversation(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]StoredMsg, error) {
	if fromSeq == 0 {
		fromSeq = 1
	}
	subj := s.cfg.ChatSubject(conv)
	var out []StoredMsg
	for {
		page, more, err := s.directBatch(ctx, s.cfg.ChatStream, subj, fromSeq, DirectBatchSize)
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			if upToSeq > 0 && m.Seq > upToSeq {
				return out, nil
			}
			out = append(out, m)
		}
		if !more || len(page) == 0 {
			return out, nil
		}
		fromSeq = page[len(page)-1].Seq + 1
	}
}

// LoadEntries is LoadConversation decoded into entries.
func (s *Store) LoadEntries(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]schemas.Entry, error) {
	msgs, err := s.LoadConversation(ctx, conv, fromSeq, upToSeq)
	if err != nil {
		return nil, err
	}
	es := make([]schemas.Entry, len(msgs))
	for i, m := range msgs {
		es[i] = m.Entry()
	}
	return es, nil
}

// directBatch sends one batched direct get and collects the answers up to the end-of-
// batch marker. more reports whether the server said messages are still pending.
func (s *Store) directBatch(ctx context.Context, stream, subj string, fromSeq uint64, batch int) (msgs []StoredMsg, more bool, err error) {
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, fmt.Errorf("direct get %s: %w", subj, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(map[string]any{"seq": fromSeq, "next_by_subj": subj, "batch": batch})
	if err := s.nc.PublishRequest(apiPrefix+"DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, false, fmt.Errorf("direct get %s: %w", subj, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && len(msgs) == 0 {
				return nil, false, fmt.Errorf("direct get %s from %d: no answer (is direct get allowed on %s?): %w", subj, fromSeq, stream, err)
			}
			return nil, false, fmt.Errorf("direct get %s from %d: %w", subj, fromSeq, err)
		}
		if len(m.Data) == 0 {
			switch status := m.Header.Get("Status"); status {
			case "404":
				return msgs, false, nil
			case "204": // end of batch
				np, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return msgs, np > 0, nil
			case "":
			case "503":
				return nil, false, fmt.Errorf("direct get %s: %w", subj, nats.ErrNoResponders)
			default:
				return nil, false, fmt.Errorf("direct get %s: status %s %s", subj, status, m.Header.Get("Description"))
			}
		}
		sm, err := storedFromDirect(m)
		if err != nil {
			return nil, false, fmt.Errorf("direct get %s: %w", subj, err)
		}
		msgs = append(msgs, sm)
	}
}

func storedFromDirect(m *nats.Msg) (StoredMsg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(natsjs.SequenceHeader), 10, 64)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("bad %s header %q", natsjs.SequenceHeader, m.Header.Get(natsjs.SequenceHeader))
	}
	ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(natsjs.TimeStampHeaer))
	return StoredMsg{Seq: seq, Subject: m.Header.Get(natsjs.SubjectHeader), Time: ts, Header: m.Header, Data: m.Data}, nil
}

// apiMsgGet is the stream leader's answer to a message get.
type apiMsgGet struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
	Message *struct {
		Subject string    `json:"subject"`
		Seq     uint64    `json:"seq"`
		Hdrs    []byte    `json:"hdrs"`
		Data    []byte    `json:"data"`
		Time    time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// errNoMessage is the leader's "no message found".
var errNoMessage = errors.New("no message found")

// leaderGet asks the stream leader (not any replica) for one message.
func (s *Store) leaderGet(ctx context.Context, stream string, req map[string]any) (StoredMsg, error) {
	body, _ := json.Marshal(req)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	resp, err := s.nc.RequestWithContext(ctx, apiPrefix+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("leader get on %s: %w", stream, err)
	}
	var r apiMsgGet
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return StoredMsg{}, fmt.Errorf("leader get on %s: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == int(natsjs.JSErrCodeMessageNotFound) || r.Error.Code == 404 {
			return StoredMsg{}, errNoMessage
		}
		return StoredMsg{}, fmt.Errorf("leader get on %s: %s (code %d)", stream, r.Error.Description, r.Error.ErrCode)
	}
	if r.Message == nil {
		return StoredMsg{}, fmt.Errorf("leader get on %s: empty answer", stream)
	}
	sm := StoredMsg{Seq: r.Message.Seq, Subject: r.Message.Subject, Time: r.Message.Time, Data: r.Message.Data}
	if len(r.Message.Hdrs) > 0 {
		if h, err := decodeHeaders(r.Message.Hdrs); err == nil {
			sm.Header = h
		}
	}
	return sm, nil
}

// decodeHeaders parses a "NATS/1.0\r\nKey: Value\r\n..." header block.
func decodeHeaders(b []byte) (nats.Header, error) {
	lines := strings.Split(string(b), "\r\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "NATS/1.0") {
		return nil, errors.New("bad header block")
	}
	h := nats.Header{}
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return h, nil
}

// LoadConversationLeader is LoadConversation answered by the stream leader, one message
// per request: slower, but it sees every acknowledged write (read-your-writes).
func (s *Store) LoadConversationLeader(ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]StoredMsg, error) {
	if fromSeq == 0 {
		fromSeq = 1
	}
	var out []StoredMsg
	for upToSeq == 0 || fromSeq <= upToSeq {
		m, err := s.leaderGet(ctx, s.cfg.ChatStream, map[string]any{"seq": fromSeq, "next_by_subj": s.cfg.ChatSubject(conv)})
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

// GetMessage reads one CHAT message by sequence (direct get).
func (s *Store) GetMessage(ctx context.Context, seq uint64) (StoredMsg, error) {
	st, err := s.js.Stream(ctx, s.cfg.ChatStream)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("stream %s: %w", s.cfg.ChatStream, err)
	}
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("get %s seq %d: %w", s.cfg.ChatStream, seq, err)
	}
	return StoredMsg{Seq: raw.Sequence, Subject: raw.Subject, Time: raw.Time, Header: raw.Header, Data: raw.Data}, nil
}

// LoadPinned reads the messages at seqs (a value's pinned_seqs) by sequence, as entries.
func (s *Store) LoadPinned(ctx context.Context, seqs []uint64) ([]schemas.Entry, error) {
	out := make([]schemas.Entry, 0, len(seqs))
	for _, seq := range seqs {
		m, err := s.GetMessage(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("load pinned message %d: %w", seq, err)
		}
		out = append(out, m.Entry())
	}
	return out, nil
}

// LastSeq returns the sequence of a conversation's newest message, 0 when it has none.
func (s *Store) LastSeq(ctx context.Context, conv string) (uint64, error) {
	m, err := s.leaderGet(ctx, s.cfg.ChatStream, map[string]any{"last_by_subj": s.cfg.ChatSubject(conv)})
	if errors.Is(err, errNoMessage) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}
