package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Store is the JetStream side of the contract: CHAT, the work queue, the events, the
// dead letters and the results bucket. It knows subjects and payloads, nothing of how
// triggers decide or how summaries are written.
//
// It is a small root: each resource is read and written through its handle (Chat,
// Results, Queue, Events, Objects, Policies, Activity, Windows and Membership), made once with
// the store, so asking for one costs nothing. The store itself keeps what spans
// resources: its config and health, forgetting a conversation and taking back what was
// written for a forgotten one, and the recall.
type Store struct {
	core

	chat     Chat
	results  Results
	queue    Queue
	events   Events
	objects  Objects
	policies Policies
	activity Activity
	windows  Windows

	missingBuckets []string
	// pendingUpgrades are the differences Provision left for an update of existing
	// streams that are not conflicts (an objects bucket that allows roll-ups).
	pendingUpgrades []Difference
}

// MissingBuckets names the optional buckets provisioning found missing and could not
// create with this user's rights (see Provision): what they hold is off until an admin
// provisions.
func (s *Store) MissingBuckets() []string { return s.missingBuckets }

// PendingUpgrades are the settings Provision found as an earlier version left them and
// left alone, though they are not conflicts: the objects bucket allowing roll-ups, which
// an update of existing streams (UpdateExisting, as admin) turns off once every client
// is of this version.
func (s *Store) PendingUpgrades() []Difference { return s.pendingUpgrades }

// core is the state every handle shares: the connection, the JetStream context and
// the reads shared between resources. The store and each handle embed it.
type core struct {
	nc        *nats.Conn
	js        natsjs.JetStream
	cfg       Config
	resultsKV natsjs.KeyValue

	// replies routes the answers of batched direct gets (see replies).
	replies replies
	// lastForget and lastResults coalesce the first-sight reads of tombstones and
	// values (see Results.FirstSight).
	lastForget, lastResults lastReads

	objMu    sync.Mutex
	objStore natsjs.ObjectStore // bound on the first object stored

	// consumerRefused is the last refusal of a consumer's pull or ack (see
	// Store.ConsumerRefused).
	consumerRefused atomic.Pointer[refusal]

	// policyHub is the subscription every policy watch shares (see Policies.Watch).
	policyHub policyHub
}

// bindHandles makes the store's handles; newStore calls it once.
func (s *Store) bindHandles() {
	s.chat = Chat{&s.core}
	s.results = Results{&s.core}
	s.queue = Queue{&s.core}
	s.events = Events{&s.core}
	s.objects = Objects{&s.core}
	s.policies = Policies{&s.core}
	s.activity = Activity{&s.core}
	s.windows = Windows{core: &s.core}
}

// Config returns the store's config.
func (s *Store) Config() Config { return s.cfg }

// Chat returns the handle on CHAT: the conversations' messages.
func (s *Store) Chat() *Chat { return &s.chat }

// Results returns the handle on the results bucket: the compaction values.
func (s *Store) Results() *Results { return &s.results }

// Queue returns the handle on the work queue: the compaction requests.
func (s *Store) Queue() *Queue { return &s.queue }

// Events returns the handle on the events and the dead letters.
func (s *Store) Events() *Events { return &s.events }

// Objects returns the handle on the objects bucket: the contents over the max payload.
func (s *Store) Objects() *Objects { return &s.objects }

// Policies returns the handle on the policy bucket: the conversations' own settings.
func (s *Store) Policies() *Policies { return &s.policies }

// Activity returns the handle on ACTIVITY: the conversations' idle timers.
func (s *Store) Activity() *Activity { return &s.activity }

const apiPrefix = "$JS.API."

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

// directBatch sends one batched direct get and collects the answers up to the end-of-
// batch marker. more reports whether the server said messages are still pending.
func (s *core) directBatch(ctx context.Context, stream, subj string, fromSeq uint64, batch int) (msgs []StoredMsg, more bool, err error) {
	msgs, more, err = s.directRequest(ctx, stream, map[string]any{"seq": fromSeq, "next_by_subj": subj, "batch": batch}, subj)
	if err != nil {
		return nil, false, fmt.Errorf("%w (from %d)", err, fromSeq)
	}
	return msgs, more, nil
}

// directMaxBytes is the most bytes one batched direct get answers with: nats-server's
// default max_pending, the bound it applies when the request names none.
const directMaxBytes = 64 << 20

// directRequest sends one batched direct get request (subj names what it reads, for
// errors) and collects the answers up to the end-of-batch marker.
func (s *core) directRequest(ctx context.Context, stream string, request map[string]any, subj string) (msgs []StoredMsg, more bool, err error) {
	if _, ok := request["max_bytes"]; !ok {
		// The server's own bound, stated: without it, the server reads its max_pending
		// option for each answer without the lock a configuration reload takes (a data
		// race in nats-server 2.15 that the race detector reports in a process that embeds
		// the server and reloads it).
		request["max_bytes"] = directMaxBytes
	}
	inbox, pr, done, err := s.replies.open()
	if err != nil {
		return nil, false, fmt.Errorf("direct get %s: %w", subj, err)
	}
	defer done()
	req, _ := json.Marshal(request)
	if err := s.nc.PublishRequest(apiPrefix+"DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, false, fmt.Errorf("direct get %s: %w", subj, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	for {
		var answers []*nats.Msg
		select {
		case <-pr.ready:
			answers = pr.take()
		case <-ctx.Done():
			err := ctx.Err()
			if errors.Is(err, context.DeadlineExceeded) && len(msgs) == 0 {
				return nil, false, fmt.Errorf("direct get %s: no answer (is direct get allowed on %s?): %w", subj, stream, err)
			}
			return nil, false, fmt.Errorf("direct get %s: %w", subj, err)
		}
		for _, m := range answers {
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

// leaderGet asks the stream leader (not any replica) for one message. A stream that
// does not exist holds no message.
func (s *core) leaderGet(ctx context.Context, stream string, req map[string]any) (StoredMsg, error) {
	return s.leaderGetOf(ctx, stream, req, false)
}

// leaderGetOf is leaderGet; with missingIsError a stream that does not exist is an
// error, not an empty answer.
func (s *core) leaderGetOf(ctx context.Context, stream string, req map[string]any, missingIsError bool) (StoredMsg, error) {
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
		missing := r.Error.ErrCode == int(natsjs.JSErrCodeStreamNotFound)
		if r.Error.ErrCode == int(natsjs.JSErrCodeMessageNotFound) || (r.Error.Code == 404 && !(missing && missingIsError)) {
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
