package schemas_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

const resultV1 = `{"schema_version":1,"conversation":"c1","generation":3,"summary":"s","summary_role":"system",` +
	`"tail_start_seq":10,"covered_through_seq":9,"pinned_seqs":[1,2],"overrides":[{"seq":12,"keep_head":5,"keep_tail":6,"note":"n"}],` +
	`"strategy":"last_n","trigger":"budget","reason":"r","request_id":"rq","request_seq":4,"llm_base_generation":2,` +
	`"fallback":false,"model":"m","prompt_hash":"h","tokens_before":100,"tokens_after":40,"messages_before":9,` +
	`"messages_after":3,"usage":{"prompt_tokens":7,"completion_tokens":8,"cached_tokens":6},"declined_at_seq":0,"created_at":"2025-01-02T03:04:05Z"}`

func withFields(base string, extra string) string {
	return strings.TrimSuffix(base, "}") + "," + extra + "}"
}

func TestDecodeResult(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	want := &schemas.Result{
		SchemaVersion: 1, Conversation: "c1", Generation: 3, Summary: "s", SummaryRole: schemas.RoleSystem,
		TailStartSeq: 10, CoveredThroughSeq: 9, PinnedSeqs: []uint64{1, 2},
		Overrides: []schemas.Override{{Seq: 12, KeepHead: 5, KeepTail: 6, Note: "n"}},
		Strategy:  "last_n", Trigger: "budget", Reason: "r", RequestID: "rq", RequestSeq: 4, LLMBaseGeneration: 2,
		Model: "m", PromptHash: "h", TokensBefore: 100, TokensAfter: 40, MessagesBefore: 9, MessagesAfter: 3,
		Usage: &schemas.Usage{PromptTokens: 7, CompletionTokens: 8, CachedTokens: 6}, CreatedAt: created,
	}
	tests := []struct {
		name        string
		give        string
		want        *schemas.Result
		wantUnknown map[string]string
		wantNewer   int  // the version an *ErrNewerSchema names
		wantInvalid bool // a *ValidationError (ErrInvalid)
		wantErr     bool // any other error
	}{
		{name: "every field", give: resultV1, want: want},
		{
			name: "unknown fields kept", give: withFields(resultV1, `"future":{"a" : [1, 2]},"zz":"y"`), want: want,
			wantUnknown: map[string]string{"future": `{"a" : [1, 2]}`, "zz": `"y"`},
		},
		{
			name: "a differently cased name is unknown, not read",
			give: withFields(resultV1, `"Summary":"other"`), want: want,
			wantUnknown: map[string]string{"Summary": `"other"`},
		},
		{name: "newer version", give: `{"schema_version":2,"conversation":"c1"}`, wantNewer: 2},
		{name: "newer version with changed field types", give: `{"schema_version":7,"generation":"g-7","summary":{"parts":[]}}`, wantNewer: 7},
		{name: "missing version", give: `{"conversation":"c1"}`, wantInvalid: true},
		{name: "version zero", give: `{"schema_version":0}`, wantInvalid: true},
		{name: "version not an integer", give: `{"schema_version":"1"}`, wantInvalid: true},
		{name: "v1 with a field of the wrong type", give: `{"schema_version":1,"generation":"x"}`, wantErr: true},
		{name: "evidence_text not a string", give: withFields(resultV1, `"evidence_text":7`), wantInvalid: true},
		{name: "evidence not an object", give: withFields(resultV1, `"evidence":[]`), wantInvalid: true},
		{name: "evidence item count not a number", give: withFields(resultV1, `"evidence":{"items":[{"count":"1"}]}`), wantInvalid: true},
		{name: "evidence through_seq negative", give: withFields(resultV1, `"evidence":{"through_seq":-1}`), wantInvalid: true},
		{name: "not JSON", give: `{`, wantErr: true},
		{name: "not an object", give: `[1]`, wantErr: true},
		{name: "tail_start_seq 0", give: `{"schema_version":1,"conversation":"c1","tail_start_seq":0}`, wantInvalid: true},
		{name: "covered through the tail start", give: `{"schema_version":1,"conversation":"c1","tail_start_seq":5,"covered_through_seq":5}`, wantInvalid: true},
		{name: "pinned sequence 0", give: `{"schema_version":1,"conversation":"c1","tail_start_seq":5,"pinned_seqs":[0]}`, wantInvalid: true},
		{name: "conversation id that breaks the rule", give: `{"schema_version":1,"conversation":"a.*","tail_start_seq":1}`, wantInvalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemas.DecodeResult([]byte(tt.give))
			var newer *schemas.ErrNewerSchema
			switch {
			case tt.wantNewer != 0:
				if !errors.As(err, &newer) || newer.Version != tt.wantNewer {
					t.Fatalf("got %v; want *ErrNewerSchema{%d}", err, tt.wantNewer)
				}
				if !strings.Contains(err.Error(), "upgrade the reader") {
					t.Errorf("Error() got %q; want it to tell the reader to upgrade", err)
				}
				return
			case tt.wantInvalid:
				if !errors.Is(err, schemas.ErrInvalid) {
					t.Fatalf("got %v; want ErrInvalid", err)
				}
				return
			case tt.wantErr:
				if err == nil || errors.As(err, &newer) {
					t.Fatalf("got %v; want a decode error", err)
				}
				return
			case err != nil:
				t.Fatalf("got %v; want nil", err)
			}
			unknown := got.Unknown
			got.Unknown = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
			gotUnknown := map[string]string{}
			for k, v := range unknown {
				gotUnknown[k] = string(v)
			}
			if tt.wantUnknown == nil {
				tt.wantUnknown = map[string]string{}
			}
			if !reflect.DeepEqual(gotUnknown, tt.wantUnknown) {
				t.Errorf("Unknown got %v; want %v", gotUnknown, tt.wantUnknown)
			}
		})
	}
}

func TestResultUnknownRoundTrip(t *testing.T) {
	give := withFields(resultV1, `"future":{"a":[1,2]},"Summary":"other"`)
	r, err := schemas.DecodeResult([]byte(give))
	if err != nil {
		t.Fatal(err)
	}
	r.Generation++ // a writer changes a known field and writes the value back
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	if got, want := string(all["future"]), `{"a":[1,2]}`; got != want {
		t.Errorf("future got %s; want %s", got, want)
	}
	if got, want := string(all["Summary"]), `"other"`; got != want {
		t.Errorf("Summary got %s; want %s", got, want)
	}
	if got, want := string(all["generation"]), `4`; got != want {
		t.Errorf("generation got %s; want %s", got, want)
	}
	back, err := schemas.DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("decode(marshal(r)) got %+v; want %+v", back, r)
	}
}

func TestResultMarshalKnownWins(t *testing.T) {
	r := schemas.Result{SchemaVersion: 1, Conversation: "c", Summary: "real", TailStartSeq: 1,
		Unknown: map[string]json.RawMessage{"summary": json.RawMessage(`"stale"`), "x": json.RawMessage(`1`)}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), `"summary"`); got != 1 {
		t.Fatalf("%s has %d summary fields; want 1", b, got)
	}
	back, err := schemas.DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Summary != "real" || string(back.Unknown["x"]) != "1" {
		t.Fatalf("got summary %q, x %s; want %q, 1", back.Summary, back.Unknown["x"], "real")
	}
}

func TestResultMarshalNoUnknown(t *testing.T) {
	r := schemas.Result{SchemaVersion: 1, Conversation: "c"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema_version":1,"conversation":"c","generation":0,"summary":"","tail_start_seq":0,` +
		`"covered_through_seq":0,"llm_base_generation":0,"fallback":false,"tokens_before":0,"tokens_after":0,` +
		`"messages_before":0,"messages_after":0,"created_at":"0001-01-01T00:00:00Z"}`
	if string(b) != want {
		t.Fatalf("got %s; want %s", b, want)
	}
}

func TestSummaryRoleOrDefault(t *testing.T) {
	tests := []struct {
		give schemas.Role
		want schemas.Role
	}{
		{give: "", want: schemas.RoleUser},
		{give: schemas.RoleSystem, want: schemas.RoleSystem},
		{give: schemas.RoleAssistant, want: schemas.RoleAssistant},
	}
	for _, tt := range tests {
		r := schemas.Result{SummaryRole: tt.give}
		if got := r.SummaryRoleOrDefault(); got != tt.want {
			t.Errorf("SummaryRoleOrDefault() with %q got %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestRequestValidate(t *testing.T) {
	ok := schemas.Request{RequestID: "r1", Conversation: "c1", Trigger: schemas.TriggerBudget, RequestedAt: time.Unix(1, 0), UpToSeq: 5}
	with := func(f func(*schemas.Request)) schemas.Request { r := ok; f(&r); return r }
	tests := []struct {
		name    string
		give    schemas.Request
		wantErr string // the field named; "" when valid
	}{
		{name: "budget", give: ok},
		{name: "structural", give: with(func(r *schemas.Request) { r.Trigger = schemas.TriggerStructural })},
		{name: "temporal", give: with(func(r *schemas.Request) { r.Trigger = schemas.TriggerTemporal })},
		{name: "manual with instructions", give: with(func(r *schemas.Request) {
			r.Trigger, r.Instructions = schemas.TriggerManual, "keep the file names"
		})},
		{name: "empty request id", give: with(func(r *schemas.Request) { r.RequestID = "" }), wantErr: "request_id"},
		{name: "empty conversation", give: with(func(r *schemas.Request) { r.Conversation = "" }), wantErr: "conversation"},
		{name: "bad conversation", give: with(func(r *schemas.Request) { r.Conversation = "a.b" }), wantErr: "conversation"},
		{name: "empty trigger", give: with(func(r *schemas.Request) { r.Trigger = "" }), wantErr: "trigger"},
		{name: "unknown trigger", give: with(func(r *schemas.Request) { r.Trigger = "cron" }), wantErr: "trigger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v; want nil", err)
				}
				return
			}
			var ve *schemas.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.wantErr {
				t.Fatalf("got %v; want a *ValidationError naming %s", err, tt.wantErr)
			}
		})
	}
}
