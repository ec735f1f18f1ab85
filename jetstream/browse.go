package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// The reads of this file serve people looking at the pipeline (the web view): every one
// is bounded, and each uses only what the api user of deploy/nats/accounts.conf may do
// (stream info, leader gets, batched direct gets on CHAT, ordered consumers on the
// events), so the view runs in the api role.

// ConversationCount is a conversation that has messages in CHAT, and how many.
type ConversationCount struct {
	ID       string `json:"conversation"`
	Messages uint64 `json:"messages"`
}

// ConversationList is one page of the conversations with messages in CHAT, in the
// order of their subjects.
type ConversationList struct {
	Conversations []ConversationCount
	// Subjects is how many CHAT subjects hold messages: the number of conversations,
	// unless some are stored under two partition layouts while the count changes.
	Subjects int
}

// MaxListPage bounds one page of Chat.List.
const MaxListPage = 1000

// eachConversation calls fn with the conversation of every CHAT subject (a
// conversation stored under two partition layouts, once per subject), a page of the
// server's answer (up to 100,000 subjects) at a time.
func (ch *Chat) eachConversation(ctx context.Context, fn func(conv string)) error {
	for offset := 0; ; {
		subjects, total, err := ch.subjectsPage(ctx, offset)
		if err != nil {
			return err
		}
		for subj := range subjects {
			if conv, ok := ch.cfg.ConversationOf(subj); ok {
				fn(conv)
			}
		}
		offset += len(subjects)
		if len(subjects) == 0 || offset >= total {
			return nil
		}
	}
}

// subjectsPage is one stream info answer's page of CHAT's subjects with their message
// counts, from offset on (at most 100,000), and how many subjects CHAT holds in all.
func (ch *Chat) subjectsPage(ctx context.Context, offset int) (map[string]uint64, int, error) {
	var info struct {
		State struct {
			Subjects map[string]uint64 `json:"subjects"`
		} `json:"state"`
		Total int `json:"total"`
	}
	req := map[string]any{"subjects_filter": ch.cfg.ChatPrefix + ".>", "offset": offset}
	if err := ch.apiRequest(ctx, apiPrefix+"STREAM.INFO."+ch.cfg.ChatStream, req, &info); err != nil {
		return nil, 0, fmt.Errorf("list the conversations of %s: %w", ch.cfg.ChatStream, err)
	}
	return info.State.Subjects, info.Total, nil
}

// List returns the conversations of limit CHAT subjects, skipping the
// first offset subjects in sorted order. The server answers a stream info with its
// subjects and their counts, at most 100,000 from offset on, so a call costs the
// server a walk of its subject index and the answer is bounded whatever CHAT holds.
// Subjects that do not name a valid conversation are left out.
func (ch *Chat) List(ctx context.Context, offset, limit int) (ConversationList, error) {
	if offset < 0 || limit < 1 || limit > MaxListPage {
		return ConversationList{}, fmt.Errorf("list conversations: offset %d, limit %d: the offset must not be negative and the limit must be 1 to %d", offset, limit, MaxListPage)
	}
	counts, total, err := ch.subjectsPage(ctx, offset)
	if err != nil {
		return ConversationList{}, err
	}
	subjects := make([]string, 0, len(counts))
	for subj := range counts {
		subjects = append(subjects, subj)
	}
	// The server sorts only the pages after the first; sorting here makes every page
	// follow the same order.
	slices.Sort(subjects)
	// A page is limit subjects, so that the next one starts at offset + limit: one that
	// names no conversation leaves the page a row short.
	out := ConversationList{Subjects: total}
	for _, subj := range subjects[:min(limit, len(subjects))] {
		conv, ok := ch.cfg.ConversationOf(subj)
		if !ok {
			continue
		}
		// A conversation's subjects sort next to each other (an id holds no dot), so
		// one stored under two layouts is counted once (unless a page ends between
		// them).
		if n := len(out.Conversations); n > 0 && out.Conversations[n-1].ID == conv {
			out.Conversations[n-1].Messages += counts[subj]
			continue
		}
		out.Conversations = append(out.Conversations, ConversationCount{ID: conv, Messages: counts[subj]})
	}
	return out, nil
}

// Revision is one stored revision of a conversation's value in the results bucket.
type Revision struct {
	// Revision is the KV revision: the sequence in the bucket's stream.
	Revision uint64
	// Time is when the revision was written, by the stream's clock.
	Time time.Time
	// Operation is "" for a value, "DEL" or "PURGE" for a marker left by a delete.
	Operation string
	// Value is the decoded value; nil for a marker, or when Err says why it did not
	// decode (a newer schema, a broken value).
	Value *schemas.Result
	Err   error
}

// MaxRevisions bounds Results.History: the most a bucket keeps per key.
const MaxRevisions = 64

// History returns the revisions of conv's value the results bucket still keeps,
// oldest first, with delete markers. It reads them from the stream leader one by one,
// each the next message of the key's subject, at most MaxRevisions; more reports that
// the key had more (only a bucket configured beyond the contract keeps so many).
func (rs *Results) History(ctx context.Context, conv string) (revs []Revision, more bool, err error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, false, err
	}
	stream, subj := "KV_"+rs.cfg.ResultsBucket, "$KV."+rs.cfg.ResultsBucket+"."+conv
	for seq := uint64(1); ; {
		m, err := rs.leaderGet(ctx, stream, map[string]any{"seq": seq, "next_by_subj": subj})
		if errors.Is(err, errNoMessage) {
			return revs, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("read the history of %s/%s: %w", rs.cfg.ResultsBucket, conv, err)
		}
		if len(revs) == MaxRevisions {
			return revs, true, nil
		}
		if m.Subject != subj {
			return nil, false, fmt.Errorf("read the history of %s/%s: answered with subject %q", rs.cfg.ResultsBucket, conv, m.Subject)
		}
		r := Revision{Revision: m.Seq, Time: m.Time}
		switch op := m.Header.Get("KV-Operation"); op {
		case "DEL", "PURGE":
			r.Operation = op
		default:
			r.Value, r.Err = decodeResultOf(conv, m.Data)
		}
		revs = append(revs, r)
		seq = m.Seq + 1
	}
}

// MaxEvents bounds Events.History.
const MaxEvents = 1000

// History returns conv's stored events from since on (zero: all), oldest
// first, reading at most limit; more reports that there were more. Events that do not
// decode or name another conversation are left out. It reads them with an ordered consumer that
// the server removes soon after the read.
func (es *Events) History(ctx context.Context, conv string, since time.Time, limit int) (evs []schemas.Event, more bool, err error) {
	if limit < 1 || limit > MaxEvents {
		return nil, false, fmt.Errorf("read events of %s: limit %d: must be 1 to %d", conv, limit, MaxEvents)
	}
	subj, err := es.cfg.EventSubject(conv)
	if err != nil {
		return nil, false, err
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{subj}, DeliverPolicy: natsjs.DeliverAllPolicy,
		// Gone soon after the read, rather than after the default five minutes: each
		// page a person opens makes one.
		InactiveThreshold: 10 * time.Second}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	oc, err := es.js.OrderedConsumer(ctx, es.cfg.EventsStream, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("read events of %s: %w", conv, err)
	}
	// Invalid events count towards the limit too: a subject flooded with them must not
	// make the read unbounded.
	read := 0
	for {
		batch, err := oc.FetchNoWait(min(256, limit+1-read))
		if err != nil {
			return nil, false, fmt.Errorf("read events of %s: %w", conv, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if read == limit {
				more = true
				continue
			}
			read++
			if ev, err := es.decodeEvent(m.Subject(), m.Data()); err == nil {
				evs = append(evs, ev)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, false, fmt.Errorf("read events of %s: %w", conv, err)
		}
		if n == 0 || more {
			return evs, more, nil
		}
	}
}

// LoadPage reads at most limit of conv's messages with sequence in
// [fromSeq, upToSeq] (upToSeq 0: to the end), oldest first, with one batched direct get
// per subject; more reports that the range holds messages after the last returned.
func (ch *Chat) LoadPage(ctx context.Context, conv string, fromSeq, upToSeq uint64, limit int) (msgs []StoredMsg, more bool, err error) {
	if limit < 1 || limit >= DirectBatchSize {
		return nil, false, fmt.Errorf("load a page of %s: limit %d: must be 1 to %d", conv, limit, DirectBatchSize-1)
	}
	fromSeq = max(fromSeq, 1)
	subjects, err := ch.chatSubjects(ctx, conv, fromSeq)
	if err != nil {
		return nil, false, err
	}
	// Each subject is asked for one more than the page: its extra message, or the
	// server saying it has more, tells whether the range goes on. A subject cut short
	// (the server's byte limit) bounds the page at its last message, so no message of
	// another subject before it is skipped.
	var cut uint64
	for _, sub := range subjects {
		page, pending, err := ch.directBatch(ctx, ch.cfg.ChatStream, sub.name, fromSeq, limit+1)
		if err != nil {
			return nil, false, err
		}
		for _, m := range page {
			if upToSeq > 0 && m.Seq > upToSeq {
				break
			}
			msgs = append(msgs, m)
		}
		if pending && len(page) > 0 && len(page) <= limit && (upToSeq == 0 || page[len(page)-1].Seq < upToSeq) {
			last := page[len(page)-1].Seq
			if cut == 0 || last < cut {
				cut = last
			}
		}
	}
	slices.SortFunc(msgs, func(a, b StoredMsg) int { return cmp.Compare(a.Seq, b.Seq) })
	if cut > 0 {
		i, _ := slices.BinarySearchFunc(msgs, cut, func(m StoredMsg, seq uint64) int { return cmp.Compare(m.Seq, seq) })
		msgs, more = msgs[:i+1], true
	}
	if len(msgs) > limit {
		msgs, more = msgs[:limit], true
	}
	return msgs, more, nil
}
