package view

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// maxPage bounds the list's page number: past it, open a conversation by its id.
const maxPage = 100000

// list builds a page of the conversation list.
func (v *View) list(ctx context.Context, r *http.Request) (any, error) {
	page, err := uintParam(r, "page", 1, 1, maxPage)
	if err != nil {
		return nil, err
	}
	size := v.cfg.PageSize
	cl, err := v.store.Chat().List(ctx, int(page-1)*size, size)
	if err != nil {
		return nil, err
	}
	out := List{Page: int(page), PageSize: size, Subjects: cl.Subjects, Conversations: make([]Row, len(cl.Conversations)),
		More: int(page)*size < cl.Subjects}
	// Each row reads the conversation's context; a few at a time, and a row that
	// fails says so instead of failing the page.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, c := range cl.Conversations {
		g.Go(func() error {
			out.Conversations[i] = v.row(gctx, c)
			return nil
		})
	}
	_ = g.Wait()
	return out, nil
}

// row is one conversation of the list. Its value may come from any replica: a list is
// a glance, not a decision.
func (v *View) row(ctx context.Context, c jetstream.ConversationCount) Row {
	row := Row{Conversation: c.ID, Messages: c.Messages}
	value, _, tomb, err := v.store.Results().Live(ctx, c.ID, false)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	if value != nil {
		row.Generation = value.Generation
		if value.Generation > 0 && !value.CreatedAt.IsZero() {
			at := value.CreatedAt
			row.LastCompaction = &at
		}
	}
	s, count, err := v.settings(ctx, c.ID)
	if err != nil && !errors.Is(err, policy.ErrPolicy) {
		row.Error = err.Error()
		return row
	}
	ac, _, err := v.assemble(ctx, c.ID, value, tomb, count)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	g := newGauge(ac.Tokens, s.Budget(), s.Tokenizer)
	row.Gauge = &g
	return row
}

// settings resolves a conversation's settings and its token counter. An invalid
// policy gives the settings without it and an error matching policy.ErrPolicy.
func (v *View) settings(ctx context.Context, conv string) (policy.Settings, tokens.Counter, error) {
	s, perr := v.policies.Settings(ctx, conv)
	if perr != nil && !errors.Is(perr, policy.ErrPolicy) {
		return s, nil, perr
	}
	count, err := v.counter(s.Tokenizer)
	if err != nil {
		return s, nil, fmt.Errorf("tokenizer %q: %w", s.Tokenizer, err)
	}
	return s, count, perr
}

// assemble reads and assembles the context a reader would (the reader algorithm, with
// Compactor's metadata kept). Messages stored as objects are not fetched: their stubs
// carry their token counts. It also returns the time of each tail message.
func (v *View) assemble(ctx context.Context, conv string, value *schemas.Result, tomb *schemas.Tombstone, count tokens.Counter) (assemble.Context, map[uint64]time.Time, error) {
	in := assemble.Input{Value: value}
	from := uint64(1)
	if value != nil {
		var err error
		if in.Pinned, err = v.store.Chat().LoadPinned(ctx, conv, value.PinnedSeqs); err != nil {
			return assemble.Context{}, nil, err
		}
		from = max(value.TailStartSeq, 1)
	}
	if tomb != nil {
		from = max(from, tomb.ThroughSeq+1) // what the forget deleted is not shown
	}
	msgs, err := v.store.Chat().Load(ctx, conv, from, 0)
	if err != nil {
		return assemble.Context{}, nil, err
	}
	times := make(map[uint64]time.Time, len(msgs))
	in.Tail = make([]schemas.Entry, len(msgs))
	for i, m := range msgs {
		in.Tail[i] = m.Entry()
		times[m.Seq] = m.Time
	}
	return assemble.Assemble(in, assemble.Options{Raw: true, Counter: count}), times, nil
}

// conversation builds a conversation's page.
func (v *View) conversation(ctx context.Context, r *http.Request) (any, error) {
	conv, err := conversationOf(r)
	if err != nil {
		return nil, err
	}
	out := Conversation{ConversationStatus: schemas.ConversationStatus{Conversation: conv}}
	s, count, err := v.settings(ctx, conv)
	switch {
	case errors.Is(err, policy.ErrPolicy):
		out.Notes = append(out.Notes, "the conversation's policy is invalid; these are the settings without it: "+err.Error())
	case err != nil:
		return nil, err
	}
	out.Profile, out.Strategy = s.Profile, s.Strategy
	// The value from the leader, as compactor.status reads it (none when the forget
	// tombstone covers it). One that does not decode is shown as a note, and the page
	// goes on as if there were none.
	value, _, _, err := v.store.Results().Live(ctx, conv, true)
	var newer *schemas.ErrNewerSchema
	var invalid *schemas.ValidationError
	switch {
	case errors.As(err, &newer), errors.As(err, &invalid):
		out.Notes = append(out.Notes, "the current value cannot be read: "+err.Error())
		value = nil
	case err != nil:
		return nil, err
	}
	out.Value = value
	if out.LastSeq, err = v.store.Chat().LastSeq(ctx, conv); err != nil {
		return nil, err
	}
	pending, err := v.store.Queue().Pending(ctx, conv)
	if err != nil {
		out.Notes = append(out.Notes, "the pending request cannot be read: "+err.Error())
	} else if pending != nil {
		out.Pending, out.PendingRequestID = true, pending.RequestID
	}
	if out.Forgotten, err = v.store.Forgotten(ctx, conv); err != nil {
		return nil, err
	}
	if out.Timeline, err = v.timeline(ctx, conv, out.Forgotten, &out.Notes); err != nil {
		return nil, err
	}
	ac, times, err := v.assemble(ctx, conv, value, out.Forgotten, count)
	if err != nil {
		return nil, err
	}
	out.Gauge = newGauge(ac.Tokens, s.Budget(), s.Tokenizer)
	out.Context = v.contextOf(ac, value, times, count)
	return out, nil
}

// timeline reads the kept revisions of the value and the events since the oldest. A
// revision the forget tombstone covers (left by a writer that outlived the forget) is
// not shown.
func (v *View) timeline(ctx context.Context, conv string, tomb *schemas.Tombstone, notes *[]string) ([]Entry, error) {
	revs, more, err := v.store.Results().History(ctx, conv)
	if err != nil {
		return nil, err
	}
	revs = slices.DeleteFunc(revs, func(r jetstream.Revision) bool { return r.Value != nil && tomb.Covers(r.Value.FirstSeq) })
	if more {
		*notes = append(*notes, fmt.Sprintf("the timeline shows the oldest %d revisions of the value only", jetstream.MaxRevisions))
	}
	// Events a minute older than the oldest kept revision cannot belong to one; with no
	// revision, every stored event may tell of a failure.
	var since time.Time
	if len(revs) > 0 {
		since = revs[0].Time.Add(-time.Minute)
	}
	evs, evMore, err := v.store.Events().History(ctx, conv, since, jetstream.MaxEvents)
	if err != nil {
		// Durations and failures come from the events; the revisions are the timeline.
		*notes = append(*notes, "the events cannot be read, so durations and failures are missing: "+err.Error())
		evs = nil
	} else if evMore {
		*notes = append(*notes, fmt.Sprintf("only the oldest %d stored events were read: durations and failures after them are missing", jetstream.MaxEvents))
	}
	return timeline(revs, evs), nil
}

// contextOf is an assembled context as the page shows it: every pinned message (up to
// the bound), the summary, and the newest messages of the tail.
func (v *View) contextOf(ac assemble.Context, value *schemas.Result, times map[uint64]time.Time, count tokens.Counter) Context {
	out := Context{Generation: ac.Generation, TailStartSeq: max(ac.TailStartSeq, 1), Tokens: ac.Tokens, Skipped: ac.Skipped,
		Pinned: []Message{}, Tail: []Message{}}
	var pinned []uint64
	if value != nil {
		pinned = value.PinnedSeqs
	}
	var tail []Message
	for i := range ac.Messages {
		m, seq := &ac.Messages[i], ac.Seqs[i]
		if seq == 0 {
			text, c := cut(m.Content.String(), max(v.cfg.MaxChars, 64000))
			out.Summary = &Summary{Role: string(m.Role), Text: text, Cut: c, Tokens: tokens.MessageWith(count, m)}
			continue
		}
		msg := newMessage(m, seq, count, v.cfg.MaxChars)
		msg.Pinned = msg.Pinned || slices.Contains(pinned, seq)
		if t, ok := times[seq]; ok {
			msg.Time = &t
		}
		if seq < out.TailStartSeq {
			if len(out.Pinned) < v.cfg.MaxMessages {
				out.Pinned = append(out.Pinned, msg)
			}
			continue
		}
		tail = append(tail, msg)
	}
	if n := len(tail) - v.cfg.MaxMessages; n > 0 {
		out.Omitted = &Range{From: out.TailStartSeq, Through: tail[n].Seq - 1}
		tail = tail[n:]
	}
	out.Tail = append(out.Tail, tail...)
	return out
}

// messages builds a page of a conversation's raw messages in ?from=..&through=.. .
func (v *View) messages(ctx context.Context, r *http.Request) (any, error) {
	conv, err := conversationOf(r)
	if err != nil {
		return nil, err
	}
	const maxSeq = 1<<63 - 1
	from, err := uintParam(r, "from", 1, 1, maxSeq)
	if err != nil {
		return nil, err
	}
	through, err := uintParam(r, "through", 0, 0, maxSeq)
	if err != nil {
		return nil, err
	}
	if through != 0 && through < from {
		return nil, badRequest("through (%d) must not be before from (%d)", through, from)
	}
	_, count, err := v.settings(ctx, conv)
	if err != nil && !errors.Is(err, policy.ErrPolicy) {
		return nil, err
	}
	value, _, _, err := v.store.Results().Live(ctx, conv, false)
	if err != nil {
		value = nil // the page shows raw messages; the value only marks the pinned ones
	}
	msgs, more, err := v.store.Chat().LoadPage(ctx, conv, from, through, v.cfg.MaxMessages)
	if err != nil {
		return nil, err
	}
	out := Messages{Conversation: conv, From: from, Through: through, Messages: make([]Message, 0, len(msgs))}
	for _, m := range msgs {
		e := m.Entry()
		msg := Message{Seq: m.Seq, Role: "?"}
		if e.Err != nil {
			msg.Invalid = e.Err.Error()
			msg.Text, msg.Cut = cut(string(m.Data), v.cfg.MaxChars)
		} else {
			msg = newMessage(&e.Message, m.Seq, count, v.cfg.MaxChars)
		}
		msg.Pinned = msg.Pinned || (value != nil && slices.Contains(value.PinnedSeqs, m.Seq))
		t := m.Time
		msg.Time = &t
		out.Messages = append(out.Messages, msg)
	}
	if more && len(msgs) > 0 {
		out.Next = msgs[len(msgs)-1].Seq + 1
	}
	return out, nil
}
