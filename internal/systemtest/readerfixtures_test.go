package systemtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
)

// The reader fixtures of schemas/testdata/reader (format in its README.md) describe
// what a conversation's streams hold (the KV value, the CHAT messages at their
// sequences, the stored objects) and the context every reader must assemble from it.
// The Go reader runs them here against a real server loaded with each fixture; the
// TypeScript client runs the same files (clients/ts/test/fixtures.test.ts), on their
// own and against servers loaded by TestTSClient.

const readerFixtureDir = "../../schemas/testdata/reader"

type readerFixture struct {
	Description  string            `json:"description"`
	Conversation string            `json:"conversation"`
	Value        json.RawMessage   `json:"value"`
	ValueDeleted bool              `json:"value_deleted"`
	Messages     []fixtureMessage  `json:"messages"`
	Objects      []fixtureObject   `json:"objects"`
	Options      fixtureOptions    `json:"options"`
	Expected     fixtureExpected   `json:"expected"`
	objects      map[string][]byte // by id, the bytes of each object
}

type fixtureMessage struct {
	Seq          uint64          `json:"seq"`
	Conversation string          `json:"conversation"`
	Message      json.RawMessage `json:"message"`
	Raw          *string         `json:"raw"`
	RawBase64    string          `json:"raw_base64"`
	Partitions   int             `json:"partitions"`
	Deleted      bool            `json:"deleted"`
}

type fixtureObject struct {
	ID           string `json:"id"`
	Conversation string `json:"conversation"`
	Raw          string `json:"raw"`
	Stored       *bool  `json:"stored"`
}

type fixtureOptions struct {
	Raw       bool `json:"raw"`
	MaxTokens int  `json:"max_tokens"`
}

type fixtureExpected struct {
	Error        string            `json:"error"`
	Messages     []json.RawMessage `json:"messages"`
	Seqs         []uint64          `json:"seqs"`
	Generation   uint64            `json:"generation"`
	TailStartSeq uint64            `json:"tail_start_seq"`
	HasSummary   bool              `json:"has_summary"`
	Tokens       int               `json:"tokens"`
	Degraded     bool              `json:"degraded"`
	Skipped      []struct {
		Seq    uint64 `json:"seq"`
		Reason string `json:"reason"`
	} `json:"skipped"`
}

// fixtureFiller is the conversation whose messages fill the sequences a fixture leaves out.
const fixtureFiller = "fixture-filler"

func loadReaderFixtures(t *testing.T) map[string]*readerFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(readerFixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no reader fixtures in %s (%v)", readerFixtureDir, err)
	}
	out := map[string]*readerFixture{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx readerFixture
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fx.objects = map[string][]byte{}
		for _, o := range fx.Objects {
			fx.objects[o.ID] = []byte(o.Raw)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = &fx
	}
	return out
}

// objectName is the name the fixture's object id is stored under.
func (fx *readerFixture) objectName(id string) (string, []byte) {
	for _, o := range fx.Objects {
		if o.ID == id {
			conv := o.Conversation
			if conv == "" {
				conv = fx.Conversation
			}
			sum := sha256.Sum256([]byte(o.Raw))
			return conv + "/" + hex.EncodeToString(sum[:]), []byte(o.Raw)
		}
	}
	return "", nil
}

// payload is what message m stores: its raw bytes, or its JSON with a content_ref
// that names a fixture object ({"object": id, "tokens": n, and optional overrides of
// bucket and size}) filled in with the object's name, size and sha256.
func (fx *readerFixture) payload(t *testing.T, m fixtureMessage) []byte {
	t.Helper()
	switch {
	case m.Raw != nil:
		return []byte(*m.Raw)
	case m.RawBase64 != "":
		b, err := base64.StdEncoding.DecodeString(m.RawBase64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(m.Message, &msg); err != nil || msg == nil {
		return m.Message
	}
	var ref map[string]json.RawMessage
	if err := json.Unmarshal(msg["content_ref"], &ref); err != nil || ref["object"] == nil {
		return m.Message
	}
	var id string
	_ = json.Unmarshal(ref["object"], &id)
	name, object := fx.objectName(id)
	if name == "" {
		t.Fatalf("seq %d names object %q, which the fixture does not have", m.Seq, id)
	}
	delete(ref, "object")
	set := func(k string, v any) {
		if _, ok := ref[k]; !ok {
			ref[k], _ = json.Marshal(v)
		}
	}
	set("bucket", "compaction-objects")
	set("name", name)
	set("size", len(object))
	set("sha256", name[strings.LastIndexByte(name, '/')+1:])
	msg["content_ref"], _ = json.Marshal(ref)
	if _, ok := msg["content"]; !ok {
		msg["content"], _ = json.Marshal(fmt.Sprintf("[content of %d bytes stored as object %s of bucket compaction-objects]", len(object), name))
	}
	out, _ := json.Marshal(msg)
	return out
}

// loadFixture starts a server, provisions the contract and stores what fx describes,
// each message at its sequence. It returns the server.
func loadFixture(t *testing.T, fx *readerFixture) *embedded.Server {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxFor(t, 30*time.Second)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.Config()
	layout := 1
	setLayout := func(n int) {
		if n == layout {
			return
		}
		s, err := js.Stream(ctx, cfg.ChatStream)
		if err != nil {
			t.Fatal(err)
		}
		sc := s.CachedInfo().Config
		sc.SubjectTransform = nil
		if n > 1 {
			sc.SubjectTransform = &natsjs.SubjectTransformConfig{Source: cfg.ChatWildcard(),
				Destination: fmt.Sprintf("%s.{{wildcard(1)}}.msg.%d.{{partition(%d,1)}}", cfg.ChatPrefix, n, n)}
		}
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			t.Fatalf("partition layout %d: %v", n, err)
		}
		layout = n
	}
	var last uint64
	for _, m := range fx.Messages {
		setLayout(max(m.Partitions, 1))
		for last+1 < m.Seq {
			if last, err = st.Chat().Publish(ctx, fixtureFiller, []byte(`{"role":"user","content":"filler"}`), ""); err != nil {
				t.Fatal(err)
			}
		}
		conv := m.Conversation
		if conv == "" {
			conv = fx.Conversation
		}
		if last, err = st.Chat().Publish(ctx, conv, fx.payload(t, m), ""); err != nil {
			t.Fatal(err)
		}
		if last != m.Seq {
			t.Fatalf("message stored at %d; the fixture says %d (sequences must grow)", last, m.Seq)
		}
		if layout > 1 {
			s, err := js.Stream(ctx, cfg.ChatStream)
			if err != nil {
				t.Fatal(err)
			}
			sm, err := s.GetMsg(ctx, m.Seq)
			if err != nil || !strings.Contains(sm.Subject, fmt.Sprintf(".msg.%d.", layout)) {
				t.Fatalf("message %d stored on %v (%v); want the layout of %d partitions", m.Seq, sm, err, layout)
			}
		}
	}
	for _, m := range fx.Messages {
		if m.Deleted {
			s, err := js.Stream(ctx, cfg.ChatStream)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteMsg(ctx, m.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	// nats.go's ObjectStore below, as on a bucket of an earlier version
	jstest.AllowRollUps(t, nc, cfg.ObjectsBucket)
	obs, err := js.ObjectStore(ctx, cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range fx.Objects {
		if o.Stored != nil && !*o.Stored {
			continue
		}
		name, data := fx.objectName(o.ID)
		if _, err := obs.PutBytes(ctx, name, data); err != nil {
			t.Fatal(err)
		}
	}
	if len(fx.Value) > 0 && string(fx.Value) != "null" {
		kv := resultsFor(t, nc, cfg)
		if _, err := kv.Put(ctx, fx.Conversation, fx.Value); err != nil {
			t.Fatal(err)
		}
		if fx.ValueDeleted {
			if err := kv.Delete(ctx, fx.Conversation); err != nil {
				t.Fatal(err)
			}
		}
	}
	return srv
}

// checkFixture compares what a reader read (or its error) with fx's expectation.
func checkFixture(t *testing.T, fx *readerFixture, cx *pipeline.Context, err error) {
	t.Helper()
	want := fx.Expected
	if want.Error != "" {
		if err == nil || !strings.Contains(err.Error(), want.Error) {
			t.Fatalf("error %v; want one with %q", err, want.Error)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var got []json.RawMessage
	for _, m := range cx.Messages {
		b, _ := m.Encode()
		got = append(got, b)
	}
	if len(got) != len(want.Messages) {
		t.Errorf("%d messages; want %d", len(got), len(want.Messages))
	}
	for i := range min(len(got), len(want.Messages)) {
		var a, b any
		_ = json.Unmarshal(got[i], &a)
		_ = json.Unmarshal(want.Messages[i], &b)
		if !jsonEqual(a, b) {
			t.Errorf("message %d:\n got %s\nwant %s", i, got[i], want.Messages[i])
		}
	}
	if !slices.Equal(cx.Seqs, want.Seqs) {
		t.Errorf("seqs %v; want %v", cx.Seqs, want.Seqs)
	}
	if cx.Generation != want.Generation || cx.TailStartSeq != want.TailStartSeq || cx.HasSummary != want.HasSummary ||
		cx.Tokens != want.Tokens || cx.Degraded != want.Degraded {
		t.Errorf("generation %d, tail_start_seq %d, has_summary %v, tokens %d, degraded %v; want %d, %d, %v, %d, %v",
			cx.Generation, cx.TailStartSeq, cx.HasSummary, cx.Tokens, cx.Degraded,
			want.Generation, want.TailStartSeq, want.HasSummary, want.Tokens, want.Degraded)
	}
	if len(cx.Skipped) != len(want.Skipped) {
		t.Errorf("skipped %+v; want %+v", cx.Skipped, want.Skipped)
		return
	}
	for i, s := range cx.Skipped {
		if s.Seq != want.Skipped[i].Seq || !strings.Contains(s.Reason, want.Skipped[i].Reason) {
			t.Errorf("skipped %d: %d %q; want %d with %q", i, s.Seq, s.Reason, want.Skipped[i].Seq, want.Skipped[i].Reason)
		}
	}
}

// The Go reader (pipeline.Client.Context) assembles each fixture's expected context
// from a real server that holds what the fixture describes.
func TestReaderFixtures(t *testing.T) {
	for name, fx := range loadReaderFixtures(t) {
		t.Run(name, func(t *testing.T) {
			srv := loadFixture(t, fx)
			nc := jstest.ConnTo(t, srv.ClientURL())
			st, err := jetstream.Open(ctxFor(t, 10*time.Second), nc, jetstream.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			var opts []pipeline.ContextOption
			if fx.Options.Raw {
				opts = append(opts, pipeline.Raw())
			}
			if fx.Options.MaxTokens > 0 {
				opts = append(opts, pipeline.MaxTokens(fx.Options.MaxTokens))
			}
			cx, err := pipeline.NewWithStore(nc, st).Context(ctxFor(t, 10*time.Second), fx.Conversation, opts...)
			checkFixture(t, fx, cx, err)
		})
	}
}
