package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/holes"
)

var verifyCommand = &command{
	name: "verify", args: "<conv> | --all", conn: fullConn, interruptible: true,
	summary: "walk a conversation's raw history (or every one's) and report each hole: messages acknowledged and seen, no longer stored",
	about: `A hole is a message that was acknowledged and is no longer stored in CHAT, though it
was neither forgotten (compactor forget leaves a tombstone) nor aged out (below CHAT's
oldest message: its age limit, a purge of the stream): a record lost to a power failure or
a corrupted block file, or deleted from the stream directly. verify reads, from the
stream leader, every range of the conversation a compaction read (the value's witnessed
ranges: how many messages were stored there and which sequences) and compares it with
what is stored now, and lists the holes workers recorded when they declined to
summarize across one. Each hole is printed with its conversation, its sequences (named
when up to 4 are missing in a range, counted otherwise) and what was expected there.
The tail no compaction has read yet is checked by the worker of the next compaction
(against what the trigger saw), not here. Exit 9 when any hole is found, 3 when <conv>
has nothing stored. --json prints one object.

A conversation with a hole is not compacted again (every request is declined naming
it) until an operator decides: restore the messages, forget the conversation, or
accept the loss with --accept <conv>. Accepting records on the value that what is
missing up to the hole's end is lost for good: verify no longer reports it, and the
next compaction summarizes across it (compactor compact <conv> asks for one now). A
hole that appears later, above it, is a hole again.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		all := fs.Bool("all", "", "verify every conversation of CHAT and of the results bucket")
		accept := fs.Bool("accept", "", "accept the loss of <conv>'s holes: record it on the value, so compactions summarize across them")
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			var conv string
			switch {
			case *all && len(c.args) > 0:
				return usagef("verify takes a conversation id or --all, not both")
			case *all && *accept:
				return usagef("--accept takes one conversation id, not --all: accept each loss on its own")
			case !*all:
				var err error
				if conv, err = c.conversation(); err != nil {
					return usagef("verify needs a conversation id, or --all")
				}
			}
			env, err := c.loadEnv()
			if err != nil {
				return err
			}
			nc, conn, err := c.dial(env)
			if err != nil {
				return err
			}
			defer nc.Close()
			c.watchRefusals(nc)
			st, err := jetstream.Open(ctx, nc, env.jetstream())
			if err != nil {
				return openError(conn, env, err)
			}
			convs := []string{conv}
			if *all {
				if convs, err = allConversations(ctx, st); err != nil {
					return err
				}
			}
			first, err := st.Chat().StreamFirstSeq(ctx)
			if err != nil {
				return err
			}
			if *accept {
				return acceptLoss(ctx, c, st, conv, first, *asJSON)
			}
			out := verifyOutput{Conversations: make([]verifyReport, 0, len(convs))}
			for _, id := range convs {
				r, err := verifyConversation(ctx, st, id, first)
				if err != nil {
					return fmt.Errorf("verify %s: %w", id, err)
				}
				if !*all && r.nothingStored {
					return notFound(id)
				}
				out.Conversations = append(out.Conversations, r)
				out.Holes += len(r.Holes)
				if len(r.Holes) > 0 {
					out.WithHoles++
				}
			}
			if *asJSON {
				err = writeJSON(c.std.out, out)
			} else {
				err = writeVerify(c.std.out, c.std.err, out, *all)
			}
			if err != nil {
				return err
			}
			if out.Holes > 0 {
				return newError(errHoles, nil, "holes in the raw history: %d found in %d conversations (listed above), messages lost or deleted; see docs/guarantees.md", out.Holes, out.WithHoles)
			}
			return nil
		}
	},
}

// verifyOutput is what compactor verify found.
type verifyOutput struct {
	Conversations []verifyReport `json:"conversations"`
	Holes         int            `json:"holes"`
	WithHoles     int            `json:"conversations_with_holes"`
}

// verifyReport is one conversation's verification.
type verifyReport struct {
	Conversation string `json:"conversation"`
	// Holes are the holes found, each with where it was found and what was expected.
	Holes []verifyHole `json:"holes"`
	// CheckedFromSeq and CheckedThroughSeq bound the ranges compactions read (0: none).
	CheckedFromSeq    uint64 `json:"checked_from_seq,omitempty"`
	CheckedThroughSeq uint64 `json:"checked_through_seq,omitempty"`
	// Notes say what could not be checked, and why.
	Notes []string `json:"notes,omitempty"`

	nothingStored bool
}

// verifyHole is one hole and what was expected there.
type verifyHole struct {
	schemas.Hole
	// Source is "recorded" (a worker declined on it) or "witnessed" (a range a
	// compaction read holds fewer messages now).
	Source   string `json:"source"`
	Expected string `json:"expected"`
}

// allConversations are the conversations of CHAT's subjects and of the results bucket.
func allConversations(ctx context.Context, st *jetstream.Store) ([]string, error) {
	seen := map[string]bool{}
	for offset := 0; ; offset += jetstream.MaxListPage {
		page, err := st.Chat().List(ctx, offset, jetstream.MaxListPage)
		if err != nil {
			return nil, err
		}
		for _, cc := range page.Conversations {
			seen[cc.ID] = true
		}
		if offset+jetstream.MaxListPage >= page.Subjects {
			break
		}
	}
	keys, err := st.Results().Conversations(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if schemas.ValidateConversationID(k) == nil {
			seen[k] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// verifyConversation checks conv's raw history against its value: the holes workers
// recorded, and every range compactions read. streamFirst is CHAT's oldest sequence (0:
// CHAT is empty): what lies below it aged out or was purged with the stream.
func verifyConversation(ctx context.Context, st *jetstream.Store, conv string, streamFirst uint64) (verifyReport, error) {
	r := verifyReport{Conversation: conv, Holes: []verifyHole{}}
	tomb, err := st.Forgotten(ctx, conv)
	if err != nil {
		return r, err
	}
	v, _, err := st.Results().Get(ctx, conv, true)
	var newer *schemas.ErrNewerSchema
	switch {
	case errors.As(err, &newer), errors.Is(err, schemas.ErrInvalid):
		r.Notes = append(r.Notes, "its value cannot be read ("+err.Error()+"): nothing to check against")
		return r, nil
	case err != nil:
		return r, err
	}
	if v != nil && tomb.Covers(v.FirstSeq) {
		v = nil // a value of the forgotten conversation: it is removed, not checked
	}
	if v == nil {
		last, err := st.Chat().LastSeq(ctx, conv)
		if err != nil {
			return r, err
		}
		r.nothingStored = last == 0
		if !r.nothingStored {
			r.Notes = append(r.Notes, "never compacted: its messages are checked by the worker of its first compaction, against what the trigger saw")
		}
		return r, nil
	}
	goneThrough := uint64(math.MaxUint64)
	if streamFirst > 0 {
		goneThrough = streamFirst - 1
	}
	if tomb != nil {
		goneThrough = max(goneThrough, tomb.ThroughSeq)
	}
	if v.LossAcceptedThroughSeq > 0 {
		goneThrough = max(goneThrough, v.LossAcceptedThroughSeq)
		r.Notes = append(r.Notes, fmt.Sprintf("the loss of what is missing at or below seq %d was accepted (compactor verify --accept): not reported", v.LossAcceptedThroughSeq))
	}
	for _, h := range v.Holes {
		r.Holes = append(r.Holes, verifyHole{Hole: h, Source: "recorded",
			Expected: fmt.Sprintf("messages the trigger saw in [%d, %d], missing when a worker read them; it declined to summarize across them", h.FromSeq, h.ThroughSeq)})
	}
	if len(v.Witnessed) == 0 {
		r.Notes = append(r.Notes, "its value records no range a compaction read (written by an older worker, or no compaction yet): nothing to check against")
	}
	for _, w := range v.Witnessed {
		if err := w.Validate(); err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("a witnessed range of its value does not validate (%v): not checked", err))
			continue
		}
		if r.CheckedFromSeq == 0 {
			r.CheckedFromSeq = w.FromSeq
		}
		r.CheckedThroughSeq = w.ThroughSeq
		msgs, err := st.Chat().LoadLeader(ctx, conv, w.FromSeq, w.ThroughSeq)
		if err != nil {
			return r, err
		}
		seqs := make([]uint64, len(msgs))
		for i, m := range msgs {
			seqs[i] = m.Seq
		}
		h, why := holes.Check(w, seqs, goneThrough)
		if why != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("[%d, %d]: %s", w.FromSeq, w.ThroughSeq, why))
		}
		if h != nil {
			r.Holes = append(r.Holes, verifyHole{Hole: *h, Source: "witnessed",
				Expected: fmt.Sprintf("%d messages of the conversation in [%d, %d] when a compaction read them; %d stored now", w.Count, w.FromSeq, w.ThroughSeq, len(seqs))})
		}
	}
	return r, nil
}

// writeVerify prints each hole on out, one a line, and a summary: on out for one
// conversation, on errw for --all (whose out then holds the holes only).
func writeVerify(out, errw io.Writer, o verifyOutput, all bool) error {
	for _, r := range o.Conversations {
		for _, h := range r.Holes {
			if _, err := fmt.Fprintf(out, "%s: hole: %s (%s); expected: %s\n", r.Conversation, holes.String(h.Hole), h.Source, h.Expected); err != nil {
				return err
			}
		}
		if all {
			continue
		}
		for _, n := range r.Notes {
			fmt.Fprintf(out, "%s: note: %s\n", r.Conversation, n)
		}
		if len(r.Holes) == 0 {
			if r.CheckedThroughSeq > 0 {
				fmt.Fprintf(out, "%s: no hole: the ranges compactions read, seq %d to %d, hold every message they held\n", r.Conversation, r.CheckedFromSeq, r.CheckedThroughSeq)
			} else {
				fmt.Fprintf(out, "%s: no hole found\n", r.Conversation)
			}
		}
	}
	if all {
		_, err := fmt.Fprintf(errw, "verified %d conversations: %d holes in %d of them\n", len(o.Conversations), o.Holes, o.WithHoles)
		return err
	}
	return nil
}

// acceptOutput is what compactor verify --accept did.
type acceptOutput struct {
	Conversation string `json:"conversation"`
	// Accepted are the holes whose loss was accepted (none: there was nothing to accept).
	Accepted []verifyHole `json:"accepted"`
	// LossAcceptedThroughSeq is the value's mark after the command.
	LossAcceptedThroughSeq uint64 `json:"loss_accepted_through_seq"`
}

// acceptRetries bounds the rewrites of a value that changed between the read and the
// write (a worker writing it meanwhile).
const acceptRetries = 5

// acceptLoss records on conv's value that the loss of its holes is accepted: the
// holes verify finds now (recorded by workers, and in the ranges compactions read), up
// to the last missing sequence (the end of its range when the sequences could not be
// named). The value is rewritten on the revision read, so a
// worker's write meanwhile is never overwritten: the command reads and decides again.
func acceptLoss(ctx context.Context, c *call, st *jetstream.Store, conv string, streamFirst uint64, asJSON bool) error {
	for range acceptRetries {
		r, err := verifyConversation(ctx, st, conv, streamFirst)
		if err != nil {
			return fmt.Errorf("verify %s: %w", conv, err)
		}
		if r.nothingStored {
			return notFound(conv)
		}
		out := acceptOutput{Conversation: conv, Accepted: r.Holes}
		v, rev, err := st.Results().Get(ctx, conv, true)
		if err != nil {
			return fmt.Errorf("read the value of %s: %w", conv, err)
		}
		if v != nil {
			out.LossAcceptedThroughSeq = v.LossAcceptedThroughSeq
		}
		if len(r.Holes) == 0 {
			if asJSON {
				return writeJSON(c.std.out, out)
			}
			_, err := fmt.Fprintf(c.std.out, "%s: no hole to accept\n", conv)
			return err
		}
		if v == nil {
			return fmt.Errorf("%s: the holes were found on a value that is gone now; run verify again", conv)
		}
		through := v.LossAcceptedThroughSeq
		for _, h := range r.Holes {
			if len(h.Seqs) > 0 { // named: up to the last of them
				through = max(through, slices.Max(h.Seqs))
			} else {
				through = max(through, h.ThroughSeq)
			}
		}
		next := *v
		next.Holes = nil
		next.LossAcceptedThroughSeq = through
		newRev, err := st.Results().Put(ctx, &next, rev)
		if err != nil {
			if errors.Is(err, jetstream.ErrRevisionMismatch) {
				continue // written meanwhile: read and decide again
			}
			return fmt.Errorf("record the accepted loss on %s's value: %w", conv, err)
		}
		// A forget that began meanwhile removes the value; this write must not outlive
		// it (as a worker's write does not).
		if tomb, err := st.Forgotten(ctx, conv); err != nil {
			return fmt.Errorf("check %s for a forget after the write: %w", conv, err)
		} else if tomb.Covers(next.FirstSeq) {
			if err := st.Results().Remove(ctx, conv, newRev); err != nil {
				return fmt.Errorf("%s was forgotten meanwhile; take back the write: %w", conv, err)
			}
			return fmt.Errorf("%s was forgotten meanwhile: nothing was accepted", conv)
		}
		out.LossAcceptedThroughSeq = through
		if asJSON {
			return writeJSON(c.std.out, out)
		}
		for _, h := range r.Holes {
			if _, err := fmt.Fprintf(c.std.out, "%s: accepted the loss: %s (%s)\n", conv, holes.String(h.Hole), h.Source); err != nil {
				return err
			}
		}
		_, err = fmt.Fprintf(c.std.out, "%s: what is missing at or below seq %d is lost for good: compactions summarize across it (compactor compact %s asks for one now)\n", conv, through, conv)
		return err
	}
	return fmt.Errorf("%s: its value changed %d times while the loss was being recorded; try again", conv, acceptRetries)
}
