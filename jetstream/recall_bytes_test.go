package jetstream_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// objectReads counts the object descriptions read from the objects stream, by object
// name: every read of an object starts with one (Objects.Read).
type objectReads struct {
	t   *testing.T
	nc  *nats.Conn
	sub *nats.Subscription
}

func watchObjectReads(t *testing.T, ns string) *objectReads {
	t.Helper()
	nc := jstest.ConnTo(t, ns)
	sub, err := nc.SubscribeSync("$JS.API.STREAM.MSG.GET.OBJ_" + jetstream.DefaultNames().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &objectReads{t: t, nc: nc, sub: sub}
}

// take returns the reads since the last call, by object name. The flush makes every
// request the server saw before it pending here.
func (r *objectReads) take() map[string]int {
	r.t.Helper()
	if err := r.nc.Flush(); err != nil {
		r.t.Fatal(err)
	}
	n, _, err := r.sub.Pending()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int{}
	for range n {
		m, err := r.sub.NextMsg(time.Second)
		if err != nil {
			r.t.Fatal(err)
		}
		var req struct {
			LastBySubj string `json:"last_by_subj"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			r.t.Fatalf("object read %s: %v", m.Data, err)
		}
		prefix := "$O." + jetstream.DefaultNames().ObjectsBucket + ".M."
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(req.LastBySubj, prefix))
		if err != nil {
			r.t.Fatalf("object read of %s: %v", req.LastBySubj, err)
		}
		out[string(name)]++
	}
	return out
}

// publishLarge stores m's content as an object and publishes its stub, as the clients
// do for a message over the max payload; it returns the sequence and the object's name.
func publishLarge(ctx context.Context, t *testing.T, st *jetstream.Store, conv string, m schemas.Message) (uint64, string) {
	t.Helper()
	stub, body, err := m.Offload(conv, st.Config().ObjectsBucket, tokens.Estimate(&m))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Objects().Put(ctx, conv, stub.ContentRef.Name, body); err != nil {
		t.Fatal(err)
	}
	data, err := stub.Encode()
	if err != nil {
		t.Fatal(err)
	}
	seq, err := st.Chat().Publish(ctx, conv, data, "")
	if err != nil {
		t.Fatal(err)
	}
	return seq, stub.ContentRef.Name
}

// A recall selects stubs by their references' sizes and fetches the objects of what it
// returns only; a query is matched in each object, fetched and dropped one at a time; a
// byte bound leaves out what does not fit and names it. (Before, every stub of every
// window was fetched and held, whatever the recall returned: up to 1,024 objects.)
func TestRecallFetchesOnlyTheObjectsItReturns(t *testing.T) {
	ns := jstest.ServerWith(t, jstest.MaxPayload(smallPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	ctx := ctxT(t)
	st, err := jetstream.Provision(ctx, nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const big = 3 * smallPayload // each object about 48 KiB: about 12,300 tokens
	var seqs []uint64
	var names []string
	for i := range 6 {
		content := fmt.Sprintf("output %d needle-%d %s", i, i, strings.Repeat("x", big))
		seq, name := publishLarge(ctx, t, st, "lg", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(content)})
		seqs, names = append(seqs, seq), append(names, name)
	}
	reads := watchObjectReads(t, ns.ClientURL())
	recallLg := func(req schemas.RecallRequest, maxBytes int) *schemas.RecallResponse {
		t.Helper()
		req.Conversation = "lg"
		got, err := st.Recall(ctx, req, 0, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got.Messages {
			if m.Message.ContentRef != nil || !strings.HasSuffix(m.Message.Content.String(), "x") {
				t.Fatalf("message %d returned as a stub: %+v", m.Seq, m.Message.ContentRef)
			}
		}
		return got
	}

	t.Run("a budget for one object fetches that one", func(t *testing.T) {
		got := recallLg(schemas.RecallRequest{MaxTokens: 13_000}, 0)
		if got.Returned != 1 || got.Messages[0].Seq != seqs[5] || !got.CutByBudget || len(got.SkippedSeqs) != 5 {
			t.Fatalf("returned %v skipped %v; want %d only", recalledSeqs(got), got.SkippedSeqs, seqs[5])
		}
		if r := reads.take(); len(r) != 1 || r[names[5]] != 1 {
			t.Fatalf("objects read: %v; want %s once", r, names[5])
		}
		if got.Tokens > got.MaxTokens || got.Tokens < big/4 {
			t.Fatalf("tokens %d of %d", got.Tokens, got.MaxTokens)
		}
	})
	t.Run("a query is matched inside the objects", func(t *testing.T) {
		got := recallLg(schemas.RecallRequest{Query: "NEEDLE-2", MaxTokens: 1_000_000}, 0)
		if got.Returned != 1 || got.Matched != 1 || got.Messages[0].Seq != seqs[2] {
			t.Fatalf("returned %v matched %d; want %d", recalledSeqs(got), got.Matched, seqs[2])
		}
		r := reads.take()
		for i, name := range names {
			if want := 1 + btoi(i == 2); r[name] != want {
				t.Fatalf("object %d read %d times; want %d (to match, and once more to return it)", i, r[name], want)
			}
		}
	})
	t.Run("a byte bound leaves out what does not fit, unread", func(t *testing.T) {
		got := recallLg(schemas.RecallRequest{MaxTokens: 1_000_000}, 2*big+big/2)
		if got.Returned != 2 || got.Messages[0].Seq != seqs[5] || got.Messages[1].Seq != seqs[4] || !got.CutByPayload || got.CutByBudget {
			t.Fatalf("returned %v cut by payload %v by budget %v; want the newest 2, cut by payload", recalledSeqs(got), got.CutByPayload, got.CutByBudget)
		}
		if want := []uint64{seqs[3], seqs[2], seqs[1], seqs[0]}; fmt.Sprint(got.SkippedSeqs) != fmt.Sprint(want) {
			t.Fatalf("skipped %v; want %v", got.SkippedSeqs, want)
		}
		if r := reads.take(); len(r) != 2 || r[names[5]] != 1 || r[names[4]] != 1 {
			t.Fatalf("objects read: %v; want the 2 returned once each", r)
		}
		b, err := json.Marshal(got.Messages)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 2*big+big/2 {
			t.Fatalf("messages of %d bytes; bound %d", len(b), 2*big+big/2)
		}
	})
	t.Run("a returned stub whose object is gone is left out and named", func(t *testing.T) {
		allowRollUps(t, nc) // nats.go's Delete, as on a bucket of an earlier version
		obs, err := testJS(t, nc).ObjectStore(ctx, st.Config().ObjectsBucket)
		if err != nil {
			t.Fatal(err)
		}
		if err := obs.Delete(ctx, names[5]); err != nil {
			t.Fatal(err)
		}
		got := recallLg(schemas.RecallRequest{MaxTokens: 13_000}, 0)
		if got.Returned != 0 || got.Invalid != 1 || len(got.Messages) != 0 || got.Tokens != 0 || got.SkippedSeqs[len(got.SkippedSeqs)-1] != seqs[5] {
			t.Fatalf("returned %v invalid %d tokens %d skipped %v; want nothing, %d invalid and named", recalledSeqs(got), got.Invalid, got.Tokens, got.SkippedSeqs, seqs[5])
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// StoredBytes counts a conversation's bytes as stored, a stub with its object, and stops
// once past its limit: it does not read the rest.
func TestStoredBytesStopsPastItsLimit(t *testing.T) {
	ns := jstest.ServerWith(t, jstest.MaxPayload(smallPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	ctx := ctxT(t)
	st, err := jetstream.Provision(ctx, nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	line := `{"role":"user","content":"` + strings.Repeat("y", 1000) + `"}`
	var total int64
	for range 200 {
		if _, err := st.Chat().Publish(ctx, "sz", []byte(line), ""); err != nil {
			t.Fatal(err)
		}
		total += int64(len(line))
	}
	_, name := publishLarge(ctx, t, st, "sz", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("z", 3*smallPayload))})
	n, over, err := st.StoredBytes(ctx, "sz", 0, 1<<30)
	if err != nil || over || n < total+3*smallPayload {
		t.Fatalf("StoredBytes = %d, %v, %v; want all of %d and the object %s", n, over, err, total, name)
	}
	// The spy sees every direct get of CHAT: stopping at 10 KB asks for about that.
	spy := jstest.ConnTo(t, ns.ClientURL())
	gets, err := spy.SubscribeSync("$JS.API.DIRECT.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	n, over, err = st.StoredBytes(ctx, "sz", 0, 10_000)
	if err != nil || !over || n <= 10_000 || n > 10_000+int64(len(line)) {
		t.Fatalf("StoredBytes up to 10,000 = %d, %v, %v; want just past it", n, over, err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if k, _, _ := gets.Pending(); k > 3 {
		t.Fatalf("%d direct gets to count 10,000 bytes", k)
	}
}
