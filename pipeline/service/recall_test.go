package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
)

func TestServiceRecall(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	pub := func(conv, data string) uint64 {
		t.Helper()
		seq, err := s.st.Chat().Publish(ctx, conv, []byte(data), "")
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	u := pub("r1", `{"role":"user","content":"Which port does the API use?"}`)
	c := pub("r1", `{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"api.env\"}"}}]}`)
	r := pub("r1", `{"role":"tool","tool_call_id":"t1","content":"PORT=8443","tokens":3,"meta":{"k":"v"}}`)
	pub("r1", `{"role":"assistant","content":"It listens on 8443."}`)

	var got schemas.RecallResponse
	svcCall(t, s.client, schemas.RecallSubject, `{"conversation":"r1","query":"port=8443"}`, &got)
	if got.Conversation != "r1" || got.Returned != 2 || got.Messages[0].Seq != c || got.Messages[1].Seq != r || got.CutByPayload {
		t.Fatalf("recall = %+v; want the round %d, %d", got, c, r)
	}
	if m := got.Messages[1].Message; m.Meta != nil || m.Tokens != 0 || m.Content.String() != "PORT=8443" {
		t.Fatalf("recalled result = %+v; want the content without metadata", m)
	}
	svcCall(t, s.client, schemas.RecallSubject, fmt.Sprintf(`{"conversation":"r1","from_seq":%d,"to_seq":%d}`, u, u), &got)
	if got.Returned != 1 || got.Messages[0].Seq != u || !got.ScanComplete {
		t.Fatalf("recall of one sequence = %+v", got)
	}

	code, desc := svcError(t, s.client, schemas.RecallSubject, `{"conversation":"ghost"}`)
	if code != "404" || !strings.Contains(desc, "ghost not found") {
		t.Fatalf("recall of an unknown conversation: %s %q; want 404", code, desc)
	}
	for _, tc := range []struct{ body, want string }{
		{`{}`, "conversation: must not be empty"},
		{`{"conversation":"r1.x"}`, "conversation: character '.'"},
		{`{"conversation":"r1","from_seq":9,"to_seq":2}`, "from_seq: must not be after to_seq"},
		{`{"conversation":"r1","max_tokens":-5}`, "max_tokens: must be between 0"},
		{`{"conversation":"r1","max_tokens":1e9}`, "max_tokens"},
		{`{"conversation":"r1","from_seq":-1}`, "from_seq"},
		{`{"conversation":"r1","query":"` + strings.Repeat("q", schemas.MaxRecallQueryBytes+1) + `"}`, "query: is 1025 bytes long"},
		{`{"conversation":"r1","regex":".*"}`, "regex: unknown field"},
	} {
		if code, desc := svcError(t, s.client, schemas.RecallSubject, tc.body); code != "400" || !strings.Contains(desc, tc.want) {
			t.Errorf("%.60s: got %s %q; want 400 containing %q", tc.body, code, desc, tc.want)
		}
	}
}

// An answer that would pass the max payload leaves out its oldest rounds and says so.
func TestServiceRecallStaysUnderTheMaxPayload(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	big := strings.Repeat("x", 100_000)
	var seqs []uint64
	for i := range 15 {
		seq, err := s.st.Chat().Publish(ctx, "big", fmt.Appendf(nil, `{"role":"user","content":"%d %s"}`, i, big), "")
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	m, err := s.client.Request(schemas.RecallSubject, []byte(`{"conversation":"big","max_tokens":1000000}`), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(m.Data)) > s.client.MaxPayload() {
		t.Fatalf("answer of %d bytes; max payload %d", len(m.Data), s.client.MaxPayload())
	}
	var got schemas.RecallResponse
	svcCall(t, s.client, schemas.RecallSubject, `{"conversation":"big","max_tokens":1000000}`, &got)
	n := got.Returned
	if !got.CutByPayload || got.CutByBudget || n == 0 || n >= len(seqs) || got.Matched != len(seqs) {
		t.Fatalf("returned %d of %d, cut by payload %v, by budget %v", n, len(seqs), got.CutByPayload, got.CutByBudget)
	}
	if got.Messages[0].Seq != seqs[len(seqs)-1] || got.Messages[n-1].Seq != seqs[len(seqs)-n] || got.SkippedSeqs[0] != seqs[len(seqs)-n-1] {
		t.Fatalf("kept %d..%d skipped %v; want the newest %d kept and the next older named", got.Messages[0].Seq,
			got.Messages[n-1].Seq, got.SkippedSeqs, n)
	}
}

// The service selects by bytes before it fetches: a large message that cannot fit the
// answer is named in skipped_seqs without its object being read, and the smaller ones
// around it are still returned. (Before, every object of the scanned windows was read
// and held, then the answer was cut to the max payload.)
func TestServiceRecallReadsNoObjectItCannotReturn(t *testing.T) {
	const payload = 16 << 10
	srv := jstest.ServerWith(t, jstest.MaxPayload(payload))
	s := startServiceOn(t, srv.ClientURL(), service.Config{})
	ctx := svcCtx(t)
	c := pipeline.NewWithStore(s.nc, s.st)
	var seqs []uint64
	for i := range 4 {
		content := fmt.Sprintf("small %d", i)
		if i%2 == 1 { // stored as an object of about 2 max payloads
			content = fmt.Sprintf("large %d %s", i, strings.Repeat("x", 2*payload))
		}
		seq, err := c.Publish(ctx, "mixed", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(content)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	spy := jstest.ConnTo(t, srv.ClientURL())
	reads, err := spy.SubscribeSync("$JS.API.STREAM.MSG.GET.OBJ_" + jetstream.DefaultNames().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	var got schemas.RecallResponse
	svcCall(t, s.client, schemas.RecallSubject, `{"conversation":"mixed","max_tokens":1000000}`, &got)
	if fmt.Sprint(recalledSeqs(got)) != fmt.Sprint([]uint64{seqs[2], seqs[0]}) || !got.CutByPayload || got.CutByBudget ||
		fmt.Sprint(got.SkippedSeqs) != fmt.Sprint([]uint64{seqs[3], seqs[1]}) {
		t.Fatalf("returned %v skipped %v cut by payload %v; want the small ones, the large ones named", recalledSeqs(got), got.SkippedSeqs, got.CutByPayload)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := reads.Pending(); n != 0 {
		t.Fatalf("%d objects read for a recall that returns none; want none", n)
	}
}

func recalledSeqs(r schemas.RecallResponse) []uint64 {
	out := []uint64{}
	for _, m := range r.Messages {
		out = append(out, m.Seq)
	}
	return out
}
