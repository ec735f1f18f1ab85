package jetstream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

func publishN(t *testing.T, st *jetstream.Store, conv string, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := range n {
		seq, err := st.Chat().Publish(ctxT(t), conv, fmt.Appendf(nil, `{"role":"user","content":"%s %d"}`, conv, i), "")
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

// The list pages through CHAT's conversations in id order, with their message counts,
// and leaves out subjects that name no valid conversation.
func TestListConversationsPagesInOrder(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ids := []string{"e", "a", "d", "b-1", "c", "b"}
		for i, id := range ids {
			publishN(t, st, id, i+1)
		}
		// A subject of CHAT that names no valid conversation (a raw publish) is left out.
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctxT(t), "chat.bad%id.msg", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		want := []jetstream.ConversationCount{{ID: "a", Messages: 2}, {ID: "b", Messages: 6}, {ID: "b-1", Messages: 4},
			{ID: "c", Messages: 5}, {ID: "d", Messages: 3}, {ID: "e", Messages: 1}}
		var got []jetstream.ConversationCount
		for offset := 0; ; offset += 4 {
			page, err := st.Chat().List(ctxT(t), offset, 4)
			if err != nil {
				t.Fatal(err)
			}
			if page.Subjects != len(ids)+1 {
				t.Errorf("offset %d: %d subjects; want %d", offset, page.Subjects, len(ids)+1)
			}
			if len(page.Conversations) == 0 {
				break
			}
			got = append(got, page.Conversations...)
		}
		// Subjects sort "chat.b-1.msg" before "chat.b.msg": the order is the subjects'.
		slices.SortFunc(want, func(a, b jetstream.ConversationCount) int {
			return strings.Compare("chat."+a.ID+".msg", "chat."+b.ID+".msg")
		})
		if !slices.Equal(got, want) {
			t.Errorf("pages:\n got %v\nwant %v", got, want)
		}
		for _, tc := range []struct{ offset, limit int }{{-1, 1}, {0, 0}, {0, jetstream.MaxListPage + 1}} {
			if _, err := st.Chat().List(ctxT(t), tc.offset, tc.limit); err == nil {
				t.Errorf("offset %d limit %d: no error", tc.offset, tc.limit)
			}
		}
	})
}

// An empty CHAT lists nothing, without an error.
func TestListConversationsOfAnEmptyStream(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		page, err := st.Chat().List(ctxT(t), 0, 10)
		if err != nil || len(page.Conversations) != 0 || page.Subjects != 0 {
			t.Fatalf("empty CHAT: %+v, %v; want nothing", page, err)
		}
	})
}

// The history holds every kept revision oldest first: values, a delete marker, and a
// value that does not decode (as an error, not a failed read).
func TestResultHistoryKeepsMarkersAndBrokenValues(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		kv := resultsBucket(t, nc, st)
		put := func(gen uint64) {
			t.Helper()
			data, _ := json.Marshal(&schemas.Result{SchemaVersion: 1, Conversation: "h", Generation: gen, Summary: "s",
				TailStartSeq: gen + 1, CoveredThroughSeq: gen, CreatedAt: time.Now().UTC()})
			if _, err := kv.Put(ctx, "h", data); err != nil {
				t.Fatal(err)
			}
		}
		put(1)
		put(2)
		if _, err := kv.Put(ctx, "h", []byte(`{"schema_version":9}`)); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, "h"); err != nil {
			t.Fatal(err)
		}
		put(3)
		// Another key's revisions in between are not this one's.
		if _, err := kv.Put(ctx, "other", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		revs, more, err := st.Results().History(ctx, "h")
		if err != nil || more {
			t.Fatalf("history: more %v, %v", more, err)
		}
		// The bucket keeps 5 revisions of a key: all of them here.
		if len(revs) != 5 {
			t.Fatalf("%d revisions; want 5: %+v", len(revs), revs)
		}
		gens := func(r jetstream.Revision) string {
			switch {
			case r.Operation != "":
				return r.Operation
			case r.Err != nil:
				return "err"
			}
			return fmt.Sprint(r.Value.Generation)
		}
		var got []string
		for i, r := range revs {
			got = append(got, gens(r))
			if i > 0 && r.Revision <= revs[i-1].Revision {
				t.Errorf("revision %d after %d: not oldest first", r.Revision, revs[i-1].Revision)
			}
			if r.Time.IsZero() {
				t.Errorf("revision %d has no time", r.Revision)
			}
		}
		if want := []string{"1", "2", "err", "DEL", "3"}; !slices.Equal(got, want) {
			t.Errorf("history %v; want %v", got, want)
		}
		if newer := new(*schemas.ErrNewerSchema); !errors.As(revs[2].Err, newer) {
			t.Errorf("the broken value's error %v; want the newer-schema error", revs[2].Err)
		}
		if revs, _, err := st.Results().History(ctx, "never"); err != nil || len(revs) != 0 {
			t.Errorf("history of a key never written: %v, %v; want none", revs, err)
		}
		if _, _, err := st.Results().History(ctx, "a.b"); err == nil {
			t.Error("history of an invalid id: no error")
		}
	})
}

func resultsBucket(t *testing.T, nc *nats.Conn, st *jetstream.Store) natsjs.KeyValue {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxT(t), st.Config().ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// A key with more revisions than the history reads (a bucket changed by hand to keep
// more than a KV bucket can) is read up to the bound, and says there is more.
func TestResultHistoryIsBounded(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		str, err := js.Stream(ctx, "KV_"+st.Config().ResultsBucket)
		if err != nil {
			t.Fatal(err)
		}
		sc := str.CachedInfo().Config
		sc.MaxMsgsPerSubject = 2 * jetstream.MaxRevisions
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
		kv := resultsBucket(t, nc, st)
		for range jetstream.MaxRevisions + 1 {
			if _, err := kv.Put(ctx, "h", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		revs, more, err := st.Results().History(ctx, "h")
		if err != nil || !more || len(revs) != jetstream.MaxRevisions || revs[0].Revision != 1 {
			t.Fatalf("history: %d revisions from %d, more %v, %v; want the oldest %d and more", len(revs), revs[0].Revision, more, err, jetstream.MaxRevisions)
		}
	})
}

// Events are read oldest first from a time on, bounded, without those that name
// another conversation.
func TestConversationEventsAreBounded(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		start := time.Now()
		for i := range 5 {
			if err := st.Events().Publish(ctx, schemas.Event{Type: schemas.EventCompleted, Conversation: "ev",
				RequestID: fmt.Sprint("r", i), Generation: uint64(i + 1), At: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
		}
		// A payload that names another conversation than its subject.
		if err := nc.Publish(must(st.Config().EventSubject("ev")), []byte(`{"type":"completed","conversation":"x"}`)); err != nil {
			t.Fatal(err)
		}
		if err := st.Events().Publish(ctx, schemas.Event{Type: schemas.EventFailed, Conversation: "other", At: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		evs, more, err := st.Events().History(ctx, "ev", time.Time{}, 3)
		if err != nil || !more || len(evs) != 3 || evs[0].RequestID != "r0" || evs[2].RequestID != "r2" {
			t.Fatalf("limit 3: %+v more %v, %v; want r0..r2 and more", evs, more, err)
		}
		evs, more, err = st.Events().History(ctx, "ev", start, jetstream.MaxEvents)
		if err != nil || more || len(evs) != 5 {
			t.Fatalf("all: %d events, more %v, %v; want the 5 valid ones", len(evs), more, err)
		}
		evs, _, err = st.Events().History(ctx, "ev", time.Now().Add(time.Hour), 10)
		if err != nil || len(evs) != 0 {
			t.Fatalf("from the future: %+v, %v; want none", evs, err)
		}
		if _, _, err := st.Events().History(ctx, "ev", time.Time{}, 0); err == nil {
			t.Error("limit 0: no error")
		}
	})
}

// A page of a conversation's messages holds at most the limit, says whether the range
// goes on, and keeps to the range.
func TestLoadConversationPage(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		var a []uint64
		for range 30 {
			a = append(a, publishN(t, st, "a", 1)...)
			publishN(t, st, "b", 1)
		}
		seqsOf := func(msgs []jetstream.StoredMsg) []uint64 {
			var out []uint64
			for _, m := range msgs {
				out = append(out, m.Seq)
			}
			return out
		}
		for _, tc := range []struct {
			name          string
			from, through uint64
			limit         int
			want          []uint64
			more          bool
		}{
			{"first page", 1, 0, 10, a[:10], true},
			{"next page", a[9] + 1, 0, 10, a[10:20], true},
			{"last page", a[20], 0, 10, a[20:], false},
			{"a range", a[3], a[7], 10, a[3:8], false},
			{"a range cut", a[3], a[17], 10, a[3:13], true},
			{"range ends at the page", a[3], a[12], 10, a[3:13], false},
			{"past the end", a[29] + 1, 0, 10, nil, false},
		} {
			msgs, more, err := st.Chat().LoadPage(ctx, "a", tc.from, tc.through, tc.limit)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := seqsOf(msgs); !slices.Equal(got, tc.want) || more != tc.more {
				t.Errorf("%s: %v more %v; want %v more %v", tc.name, got, more, tc.want, tc.more)
			}
		}
		if _, _, err := st.Chat().LoadPage(ctx, "a", 1, 0, jetstream.DirectBatchSize); err == nil {
			t.Error("a limit of a whole batch: no error")
		}
	})
}

// must returns a subject a builder made of a valid conversation id.
func must(subject string, err error) string {
	if err != nil {
		panic(err)
	}
	return subject
}

// With a partitioned trigger the subjects carry the partition; the list names the
// conversations all the same.
func TestListConversationsPartitioned(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 4
	st, err := jetstream.Provision(ctxT(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"p1", "p2", "p3"} {
		publishN(t, st, id, i+1)
	}
	page, err := st.Chat().List(ctxT(t), 0, 10)
	want := []jetstream.ConversationCount{{ID: "p1", Messages: 1}, {ID: "p2", Messages: 2}, {ID: "p3", Messages: 3}}
	if err != nil || !slices.Equal(page.Conversations, want) {
		t.Fatalf("partitioned: %+v, %v; want %v", page.Conversations, err, want)
	}
}
