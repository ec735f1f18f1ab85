package formats_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
	"github.com/compactor/compactor/schemas/rounds"
)

// TestCorpus renders every corpus conversation, whole and compacted at its middle, in
// every format: each rendering passes its provider's validator, the openai one holds
// exactly the reader's messages, and as the tail grows (cut at several unit boundaries)
// the prefix bytes stay the same.
func TestCorpus(t *testing.T) {
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			es := c.Entries
			split := rounds.SnapForward(es, len(es)/2)
			value := &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1,
				Summary: "Summary of " + c.Name, TailStartSeq: uint64(split) + 1}
			var pinned []schemas.Entry
			if len(es) > 0 && es[0].Message.Role == schemas.RoleSystem && split > 0 {
				value.PinnedSeqs = []uint64{es[0].Seq}
				pinned = es[:1]
			}
			whole := assemble.Assemble(assemble.Input{Tail: es}, assemble.Options{})
			compacted := assemble.Assemble(assemble.Input{Value: value, Pinned: pinned, Tail: es[split:]}, assemble.Options{})
			for _, f := range formats.Names() {
				for _, cx := range []*assemble.Context{&whole, &compacted} {
					req, err := formats.Render(cx, formats.Format(f))
					if err != nil {
						t.Fatalf("%s: %v", f, err)
					}
					if err := validators[req.Format](req.JSON); err != nil {
						t.Fatalf("%s (summary %v): %v", f, cx.HasSummary, err)
					}
					if f == "openai" {
						checkOpenAI(t, cx, req.JSON)
					}
				}
				full, _ := formats.Render(&compacted, formats.Format(f))
				tail := es[split:]
				for _, k := range cuts(tail, 8) {
					cx := assemble.Assemble(assemble.Input{Value: value, Pinned: pinned, Tail: tail[:k]}, assemble.Options{})
					got, err := formats.Render(&cx, formats.Format(f))
					if err != nil {
						t.Fatalf("%s, tail of %d: %v", f, k, err)
					}
					if got.Prefix == 0 || got.Prefix != full.Prefix || !bytes.Equal(got.JSON[:got.Prefix], full.JSON[:full.Prefix]) {
						t.Fatalf("%s, tail of %d: the prefix (%d bytes) differs from the full tail's (%d bytes)", f, k, got.Prefix, full.Prefix)
					}
				}
			}
		})
	}
}

// cuts returns up to n unit boundaries of es, spread over it, the empty tail included.
func cuts(es []schemas.Entry, n int) []int {
	out := []int{0}
	for i := 1; i <= n; i++ {
		k := rounds.SnapForward(es, i*len(es)/n)
		if k != out[len(out)-1] {
			out = append(out, k)
		}
	}
	return out
}

// checkOpenAI checks that the openai rendering is the reader's messages as Encode
// writes them.
func checkOpenAI(t *testing.T, cx *assemble.Context, got json.RawMessage) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"messages":[`)
	for i := range cx.Messages {
		if i > 0 {
			b.WriteByte(',')
		}
		enc, err := cx.Messages[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(enc)
	}
	b.WriteString(`]}`)
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("openai rendering differs from the reader's messages: %s", firstDiff(got, b.Bytes()))
	}
}

func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d: %q vs %q", i, a[lo:min(len(a), i+40)], b[lo:min(len(b), i+40)])
}
