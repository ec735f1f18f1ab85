package view

import (
	"fmt"
	"slices"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// declineSkew is how much earlier than the revision that recorded it a declined event
// may say it happened: the event carries the worker's clock, the revision the stream's.
const declineSkew = 5 * time.Second

// timeline builds a conversation's timeline, newest first, from the revisions of its
// value the bucket keeps (oldest first) and its stored events (oldest first).
//
// A revision whose generation is new is a compaction; one that keeps its generation and
// sets declined_at_seq, or has generation 0, records a decline. What the kept revisions
// cannot show is said by a gap entry: the generations whose revisions are no longer
// kept, a generation that goes down (the conversation was forgotten and started again).
// The outcome events add what a revision does not hold: a compaction's duration and
// the error behind a fallback summary (matched by request id), a decline's reason
// (matched by generation and time: a decline revision keeps the request id of the
// compaction before it), and the failed requests, which leave no revision.
func timeline(revs []jetstream.Revision, evs []schemas.Event) []Entry {
	out, completed, declines := outcomeEvents(evs)
	var prev *schemas.Result // the value of the revision before, nil when unknown
	first := true
	for i, r := range revs {
		e := Entry{Revision: r.Revision, At: r.Time}
		switch {
		case r.Operation != "":
			e.Kind, e.Note = KindDeleted, fmt.Sprintf("the value was removed (%s marker)", r.Operation)
			out = append(out, e)
			prev, first = nil, false
			continue
		case r.Value == nil:
			e.Kind, e.Error = KindInvalid, errString(r.Err)
			out = append(out, e)
			prev, first = nil, false
			continue
		}
		v := r.Value
		e.Generation, e.TailStartSeq = v.Generation, v.TailStartSeq
		decline := v.Generation == 0 || v.DeclinedAtSeq > 0
		// A value's own time when it has one (the worker's clock, like the events'); a
		// decline recorded on a compaction keeps that compaction's.
		if (!decline || v.Generation == 0) && !v.CreatedAt.IsZero() {
			e.At = v.CreatedAt
		}
		g, restarted := gap(prev, v, first, decline, e.At)
		if g != nil {
			out = append(out, *g)
		}
		if restarted {
			prev = nil
		}
		if decline {
			next := time.Time{}
			if i+1 < len(revs) {
				next = revs[i+1].Time
			}
			declines.fill(&e, v, r.Time, next)
		} else {
			fillCompaction(&e, prev, v, completed)
		}
		out = append(out, e)
		prev, first = v, false
	}
	// Oldest first, events among the revisions by time (a gap stays before its
	// revision); then newest first.
	slices.SortStableFunc(out, func(a, b Entry) int { return a.At.Compare(b.At) })
	slices.Reverse(out)
	if out == nil {
		out = []Entry{} // an empty timeline, not a missing one, in the JSON twin
	}
	return out
}

// outcomeEvents sorts the stored events by outcome: the failed requests are entries of
// their own; the completed ones, by request id, and the declined ones are matched with
// the revisions that recorded them.
func outcomeEvents(evs []schemas.Event) (failed []Entry, completed map[string]schemas.Event, declined *declines) {
	completed, declined = map[string]schemas.Event{}, &declines{}
	for _, ev := range evs {
		switch ev.Type {
		case schemas.EventCompleted:
			completed[ev.RequestID] = ev
		case schemas.EventDeclined:
			declined.evs = append(declined.evs, ev)
		case schemas.EventFailed:
			d := ev.DurationMS
			failed = append(failed, Entry{Kind: KindFailed, At: ev.At, Generation: ev.Generation, Trigger: ev.Trigger,
				Reason: ev.Reason, TokensBefore: ev.TokensBefore, TokensAfter: ev.TokensAfter, DurationMS: &d, Error: ev.Error})
		}
	}
	declined.used = make([]bool, len(declined.evs))
	return failed, completed, declined
}

// gap is the entry that says what the kept revisions cannot show before value v (nil
// when nothing is missing): the generations they skip, before the oldest kept one or
// between two (which the bucket's history does not make, but a purge can), or a
// generation that goes down. restarted reports the latter: the conversation was
// forgotten and started again, and the value before is not v's.
func gap(prev, v *schemas.Result, first, decline bool, at time.Time) (g *Entry, restarted bool) {
	firstMissing := uint64(1)
	if prev != nil {
		firstMissing = prev.Generation + 1
	}
	lastMissing := v.Generation // a decline's own compaction is missing too
	if !decline {
		lastMissing--
	}
	switch {
	case prev != nil && v.Generation < prev.Generation:
		return &Entry{Kind: KindGap, At: at, Generation: v.Generation,
			Note: fmt.Sprintf("generation %d follows generation %d: the conversation was forgotten and started again", v.Generation, prev.Generation)}, true
	case v.Generation > 0 && lastMissing >= firstMissing && (prev != nil || first):
		return &Entry{Kind: KindGap, At: at, Generation: lastMissing, Note: gapNote(firstMissing, lastMissing)}, false
	}
	return nil, false
}

// declines are the declined events, each matched with one decline revision at most.
type declines struct {
	evs  []schemas.Event
	used []bool
}

// fill makes e the decline that value v records, stored at revision time at (next is
// the next revision's time, zero for the last): its reason and figures come from the
// first unused declined event of its generation between the two, allowing for skew.
func (d *declines) fill(e *Entry, v *schemas.Result, at, next time.Time) {
	e.Kind = KindDeclined
	e.DeclinedAtSeq = v.DeclinedAtSeq
	if v.Generation == 0 {
		e.TokensBefore, e.TokensAfter = v.TokensBefore, v.TokensAfter
	}
	for k, ev := range d.evs {
		if !d.used[k] && ev.Generation == v.Generation && !ev.At.Before(at.Add(-declineSkew)) &&
			(next.IsZero() || ev.At.Before(next.Add(declineSkew))) {
			d.used[k] = true
			dur := ev.DurationMS
			e.DurationMS, e.Error, e.Trigger, e.Reason = &dur, ev.Error, ev.Trigger, ev.Reason
			e.TokensBefore, e.TokensAfter = ev.TokensBefore, ev.TokensAfter
			return
		}
	}
}

// fillCompaction makes e the compaction v, after prev (nil when unknown); its completed
// event adds the duration and the error behind a fallback summary.
func fillCompaction(e *Entry, prev, v *schemas.Result, completed map[string]schemas.Event) {
	e.Kind = KindCompaction
	e.Trigger, e.Reason, e.Strategy, e.Model, e.Fallback = v.Trigger, v.Reason, v.Strategy, v.Model, v.Fallback
	e.TokensBefore, e.TokensAfter = v.TokensBefore, v.TokensAfter
	e.MessagesBefore, e.MessagesAfter = v.MessagesBefore, v.MessagesAfter
	if ev, ok := completed[v.RequestID]; ok && v.RequestID != "" {
		d := ev.DurationMS
		e.DurationMS, e.Error = &d, ev.Error
	}
	e.Folded = folded(prev, v)
}

func gapNote(from, through uint64) string {
	if from == through {
		return fmt.Sprintf("generation %d is no longer kept in the results bucket's history", from)
	}
	return fmt.Sprintf("generations %d to %d are no longer kept in the results bucket's history", from, through)
}

// folded is the range of CHAT sequences compaction v moved out of the tail: from the
// tail start before it (1 for the first generation) to just before its own.
func folded(prev, v *schemas.Result) *Range {
	if v.TailStartSeq <= 1 {
		return nil
	}
	var from uint64
	switch {
	case prev != nil && prev.Generation > 0:
		from = prev.TailStartSeq
	case prev != nil || v.Generation == 1:
		from = 1 // before the first compaction (a decline marker keeps tail 1) the tail was everything
	}
	if from >= v.TailStartSeq {
		return nil
	}
	return &Range{From: from, Through: v.TailStartSeq - 1}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
