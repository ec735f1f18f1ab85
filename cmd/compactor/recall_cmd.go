package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

var recallCommand = &command{
	name: "recall", args: "<conv>", conn: fullConn, interruptible: true,
	summary: "print raw messages behind a summary (matching --query and/or a sequence range), one per line (JSONL)",
	about: `Reads the conversation's raw messages from CHAT (compaction never deletes them): those
in [--from-seq, --to-seq] that hold --query (ignoring case), newest first within
--max-tokens (default 4000); a tool call is printed together with all its results, in
stream order, or not at all. Each line is one message with its CHAT sequence in "seq".
A line on stderr sums up: matched, returned, what the budget cut (the first sequence of
each round left out, to recall with a range and a larger budget) and the range scanned
(a scan reads at most --scan-limit messages, newest first). --json prints one object
instead (the compactor.recall answer). A conversation with nothing stored is not found
(exit 3).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		query := fs.String("query", "q", "TEXT", "only messages that hold TEXT, ignoring case (content, names, tool calls and results)")
		fromSeq := fs.Uint64("from-seq", "N", "search from CHAT sequence N on (inclusive)")
		toSeq := fs.Uint64("to-seq", "M", "search up to CHAT sequence M (inclusive)")
		maxTokens := fs.Int("max-tokens", "N", "budget of the printed messages (default 4000)")
		scanLimit := fs.Int("scan-limit", "N", "read at most N messages, newest first (default 20000)")
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			conv, err := c.conversation()
			if err != nil {
				return err
			}
			req := schemas.RecallRequest{Conversation: conv, Query: *query, FromSeq: *fromSeq, ToSeq: *toSeq, MaxTokens: *maxTokens}
			if err := req.Validate(); err != nil {
				var ve *schemas.ValidationError
				if errors.As(err, &ve) {
					return usagef("--%s: %s", strings.ReplaceAll(ve.Field, "_", "-"), ve.Rule)
				}
				return usagef("%v", err)
			}
			if *scanLimit < 0 || *scanLimit > jetstream.MaxRecallScanLimit {
				return usagef("--scan-limit must be 0 (the default, %d) to %d, got %d", jetstream.DefaultRecallScanLimit, jetstream.MaxRecallScanLimit, *scanLimit)
			}
			cl, nc, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := mustExist(ctx, cl, conv); err != nil {
				return err
			}
			r, err := cl.Recall(ctx, conv, pipeline.Query(*query), pipeline.FromSeq(*fromSeq), pipeline.ToSeq(*toSeq),
				pipeline.MaxTokens(*maxTokens), pipeline.ScanLimit(*scanLimit))
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(c.std.out, r)
			}
			w := bufio.NewWriter(c.std.out)
			for _, m := range r.Messages {
				b, err := json.Marshal(m) // compact: one line each
				if err != nil {
					return err
				}
				w.Write(b)
				w.WriteByte('\n')
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(c.std.err, recallSummary(r))
			return nil
		}
	},
}

// recallSummary is the stderr line of compactor recall.
func recallSummary(r *pipeline.Recalled) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: matched %s, returned %s (about %s of %s tokens)", r.Conversation,
		thousands(r.Matched), thousands(r.Returned), thousands(r.Tokens), thousands(r.MaxTokens))
	if r.CutByBudget {
		fmt.Fprintf(&b, "; cut by the budget, left out from seq %s (raise --max-tokens or recall a range)", joinSeqs(r.SkippedSeqs))
	} else {
		b.WriteString("; not cut by the budget")
	}
	if r.Incomplete > 0 {
		fmt.Fprintf(&b, "; %d in tool rounds not whole in the range left out", r.Incomplete)
	}
	if r.Invalid > 0 {
		fmt.Fprintf(&b, "; %d invalid skipped", r.Invalid)
	}
	switch {
	case r.ScannedToSeq == 0:
		b.WriteString("; no message in the range")
	case r.ScanComplete:
		fmt.Fprintf(&b, "; scanned seq %d to %d", r.ScannedFromSeq, r.ScannedToSeq)
	default:
		fmt.Fprintf(&b, "; scanned seq %d to %d only (the scan limit): older messages were not searched (--to-seq %d goes on)",
			r.ScannedFromSeq, r.ScannedToSeq, r.ScannedFromSeq-1)
	}
	return b.String()
}

func joinSeqs(seqs []uint64) string {
	s := make([]string, len(seqs))
	for i, q := range seqs {
		s[i] = fmt.Sprint(q)
	}
	return strings.Join(s, ", ")
}
