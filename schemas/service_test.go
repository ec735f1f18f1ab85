package schemas_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// TestCompactRequestValidate checks each rule, and that the JSON Schema refuses what
// Validate refuses (except the byte limit of instructions, which JSON Schema cannot
// count).
func TestCompactRequestValidate(t *testing.T) {
	v := newValidator(t)
	tests := []struct {
		name       string
		give       schemas.CompactRequest
		wantField  string // "" = valid
		wantRule   string
		schemaSees bool // the schema refuses it too
	}{
		{name: "minimal", give: schemas.CompactRequest{Conversation: "c1"}},
		{name: "full", give: schemas.CompactRequest{Conversation: "c1", RequestID: "job-1", Instructions: "keep paths", WaitMS: 30000}},
		{name: "longest instructions", give: schemas.CompactRequest{Conversation: "c", Instructions: strings.Repeat("x", schemas.MaxInstructionsBytes)}},
		{name: "no conversation", give: schemas.CompactRequest{}, wantField: "conversation", wantRule: "must not be empty", schemaSees: true},
		{name: "bad conversation", give: schemas.CompactRequest{Conversation: "a.b"}, wantField: "conversation", wantRule: "character '.' at position 1", schemaSees: true},
		{name: "bad request id", give: schemas.CompactRequest{Conversation: "c", RequestID: "a/b"}, wantField: "request_id", wantRule: "character '/' at position 1", schemaSees: true},
		{name: "long request id", give: schemas.CompactRequest{Conversation: "c", RequestID: strings.Repeat("r", 129)}, wantField: "request_id", wantRule: "is 129 characters long", schemaSees: true},
		{name: "long instructions", give: schemas.CompactRequest{Conversation: "c", Instructions: strings.Repeat("é", schemas.MaxInstructionsBytes/2+1)}, wantField: "instructions", wantRule: "is 8194 bytes long"},
		{name: "negative wait", give: schemas.CompactRequest{Conversation: "c", WaitMS: -1}, wantField: "wait_ms", wantRule: "must not be negative", schemaSees: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
			} else {
				var ve *schemas.ValidationError
				if !errors.As(err, &ve) || ve.Field != tt.wantField || !strings.Contains(ve.Rule, tt.wantRule) || !errors.Is(err, schemas.ErrInvalid) {
					t.Fatalf("Validate() = %#v; want a *ValidationError on %s containing %q", err, tt.wantField, tt.wantRule)
				}
			}
			b, err := json.Marshal(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if serr := v.validateJSON("service-compact-request.v1.json", b); (serr != nil) != tt.schemaSees {
				t.Fatalf("schema error %v for %s; want an error: %v", serr, b, tt.schemaSees)
			}
		})
	}
}

func TestForgetRequestValidate(t *testing.T) {
	if err := (&schemas.ForgetRequest{Conversation: "c-1_x"}).Validate(); err != nil {
		t.Fatalf("valid forget request: %v", err)
	}
	for _, tc := range []struct{ give, want string }{
		{"", "conversation: must not be empty"},
		{"a.b", "conversation: character '.' at position 1"},
		{"*", "conversation: character '*' at position 0"},
		{strings.Repeat("c", 129), "conversation: is 129 characters long"},
	} {
		err := (&schemas.ForgetRequest{Conversation: tc.give}).Validate()
		if !errors.Is(err, schemas.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate(%q) = %v; want %q", tc.give, err, tc.want)
		}
	}
}

// The tombstone's key is the SHA-256 of the id, never the id; it is a valid KV key.
func TestForgetKey(t *testing.T) {
	// sha256sum of the 10 bytes "support-42", as any language computes it.
	if got, want := schemas.ForgetKey("support-42"), "b35e253286455d42d8c2fdea8dbaf3356a209334cfc56462089044ee588a88d6"; got != want {
		t.Fatalf("ForgetKey = %q; want %q", got, want)
	}
	tomb := &schemas.Tombstone{ThroughSeq: 10}
	var none *schemas.Tombstone
	if !tomb.Covers(10) || !tomb.Covers(0) || tomb.Covers(11) || none.Covers(1) {
		t.Fatal("Covers: want seq <= through_seq, and nothing for a nil tombstone")
	}
}

func TestConversationContextAndPolicyRequestValidate(t *testing.T) {
	if err := (&schemas.ConversationRequest{Conversation: "c1"}).Validate(); err != nil {
		t.Fatalf("valid conversation request: %v", err)
	}
	if err := (&schemas.ConversationRequest{}).Validate(); !errors.Is(err, schemas.ErrInvalid) || !strings.HasPrefix(err.Error(), "conversation: ") {
		t.Fatalf("empty conversation request: %v; want conversation: must not be empty", err)
	}
	for _, tc := range []struct {
		give schemas.ContextRequest
		want string
	}{
		{schemas.ContextRequest{Conversation: "c1", Format: "claude"}, `format: "claude" is not a format; use one of openai, anthropic, responses, gemini`},
		{schemas.ContextRequest{Conversation: "c1", Format: strings.Repeat("x", 5000)}, `format: "` + strings.Repeat("x", 64) + `…" is not a format`},
		{schemas.ContextRequest{Format: "openai"}, "conversation: must not be empty"},
	} {
		if err := tc.give.Validate(); !errors.Is(err, schemas.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate(%.80v) = %.200v; want %q", tc.give, err, tc.want)
		}
	}
	for _, f := range append(schemas.ContextFormats(), "") {
		if err := (&schemas.ContextRequest{Conversation: "c1", Format: f}).Validate(); err != nil {
			t.Errorf("format %q: %v", f, err)
		}
	}
	ok := schemas.PolicyRequest{Conversation: "c1", Set: map[string]any{
		"threshold": 0.6, "keep_last_n": json.Number("8"), "strategy": "all", "max_rounds": 3, "instructions": ""}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid policy request: %v", err)
	}
	for _, tc := range []struct {
		give schemas.PolicyRequest
		want string
	}{
		{schemas.PolicyRequest{Conversation: "c d"}, "conversation: character ' '"},
		{schemas.PolicyRequest{Conversation: "c", Set: map[string]any{"threshold": true}}, "set.threshold: must be a string or a number"},
		{schemas.PolicyRequest{Conversation: "c", Set: map[string]any{"b": nil, "a": []any{}}}, "set.a: must be a string or a number"},
	} {
		if err := tc.give.Validate(); !errors.Is(err, schemas.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v; want %q", tc.give, err, tc.want)
		}
	}
}

// TestServiceSchemasAcceptGoOutput checks that what the Go types write is valid under
// their schema, and that the schemas refuse what the service refuses.
func TestServiceSchemasAcceptGoOutput(t *testing.T) {
	v := newValidator(t)
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	value := &schemas.Result{SchemaVersion: 1, Conversation: "c", Generation: 1, Summary: "s", TailStartSeq: 9, CreatedAt: at}
	tests := []struct {
		name    string
		file    string
		give    any
		wantErr bool
	}{
		{name: "queued", file: "service-compact-response.v1.json", give: schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: "r"}},
		{name: "completed", file: "service-compact-response.v1.json", give: schemas.CompactResponse{Status: schemas.CompactCompleted, RequestID: "r", Result: value}},
		{name: "busy", file: "service-compact-response.v1.json", give: schemas.CompactResponse{Status: schemas.CompactBusy, Error: "pending"}},
		{name: "unknown status", file: "service-compact-response.v1.json", give: schemas.CompactResponse{Status: "lost"}, wantErr: true},
		{name: "newer result", file: "service-compact-response.v1.json", give: schemas.CompactResponse{Status: schemas.CompactCompleted,
			Result: &schemas.Result{SchemaVersion: 2, Conversation: "c"}}, wantErr: true},
		{name: "conversation request", file: "service-conversation-request.v1.json", give: schemas.ConversationRequest{Conversation: "c1"}},
		{name: "pipeline status request", file: "service-conversation-request.v1.json", give: schemas.ConversationRequest{}},
		{name: "conversation request bad id", file: "service-conversation-request.v1.json", give: schemas.ConversationRequest{Conversation: "x.y"}, wantErr: true},
		{name: "context request", file: "service-context-request.v1.json", give: schemas.ContextRequest{Conversation: "c1"}},
		{name: "context request with format", file: "service-context-request.v1.json", give: schemas.ContextRequest{Conversation: "c1", Format: "gemini"}},
		{name: "context request unknown format", file: "service-context-request.v1.json", give: schemas.ContextRequest{Conversation: "c1", Format: "claude"}, wantErr: true},
		{name: "context request without conversation", file: "service-context-request.v1.json", give: schemas.ContextRequest{Format: "openai"}, wantErr: true},
		{name: "rendered context", file: "service-context-response.v1.json", give: schemas.ContextResponse{Conversation: "c", TailStartSeq: 1, LastSeq: 1,
			Format: "anthropic", Rendered: json.RawMessage(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)}},
		{name: "rendered context not an object", file: "service-context-response.v1.json", give: map[string]any{"conversation": "c", "value": nil,
			"tail_start_seq": 1, "last_seq": 1, "format": "openai", "rendered": "[]"}, wantErr: true},
		{name: "context never compacted", file: "service-context-response.v1.json", give: schemas.ContextResponse{Conversation: "c", TailStartSeq: 1, LastSeq: 3}},
		{name: "context", file: "service-context-response.v1.json", give: schemas.ContextResponse{Conversation: "c", Value: value, TailStartSeq: 9, LastSeq: 12}},
		{name: "status", file: "service-status-response.v1.json", give: schemas.ConversationStatus{Conversation: "c", Value: value, LastSeq: 12, Pending: true, PendingRequestID: "r"}},
		{name: "status never compacted", file: "service-status-response.v1.json", give: schemas.ConversationStatus{Conversation: "c"}},
		{name: "policy read", file: "service-policy-request.v1.json", give: schemas.PolicyRequest{Conversation: "c"}},
		{name: "policy set", file: "service-policy-request.v1.json", give: schemas.PolicyRequest{Conversation: "c", Clear: true,
			Set: map[string]any{"threshold": 0.6, "keep_last_n": "8", "strategy": ""}}},
		{name: "policy set bool", file: "service-policy-request.v1.json", give: schemas.PolicyRequest{Conversation: "c", Set: map[string]any{"threshold": true}}, wantErr: true},
		{name: "policy answer", file: "service-policy-response.v1.json", give: schemas.PolicyResponse{Conversation: "c",
			Policy: map[string]string{"threshold": "0.6"}, Settings: map[string]any{"profile": "", "threshold": 0.6, "idle_after": "0s", "keep_last_n": 20}}},
		{name: "forget request", file: "service-forget-request.v1.json", give: schemas.ForgetRequest{Conversation: "c1"}},
		{name: "forget request without conversation", file: "service-forget-request.v1.json", give: schemas.ForgetRequest{}, wantErr: true},
		{name: "forget request bad id", file: "service-forget-request.v1.json", give: schemas.ForgetRequest{Conversation: "a.b"}, wantErr: true},
		{name: "forget request unknown field", file: "service-forget-request.v1.json", give: map[string]any{"conversation": "c", "everything": true}, wantErr: true},
		{name: "forget answer", file: "service-forget-response.v1.json", give: schemas.ForgetResponse{Conversation: "c", ThroughSeq: 42, ForgottenAt: at,
			Deleted: schemas.ForgetCounts{ChatMessages: 40, ResultRevisions: 3, Events: 9, Objects: 2}}},
		{name: "forget answer of nothing", file: "service-forget-response.v1.json", give: schemas.ForgetResponse{Conversation: "c", ForgottenAt: at}},
		{name: "forget answer without counts", file: "service-forget-response.v1.json", give: map[string]any{"conversation": "c", "through_seq": 1, "forgotten_at": at}, wantErr: true},
		{name: "policy answer without profile", file: "service-policy-response.v1.json", give: schemas.PolicyResponse{Conversation: "c",
			Policy: map[string]string{}, Settings: map[string]any{"threshold": 0.6}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.validateJSON(tt.file, b); (err != nil) != tt.wantErr {
				t.Fatalf("schema error %v for %s; want error %v", err, b, tt.wantErr)
			}
			if r, ok := tt.give.(schemas.PolicyRequest); ok && (r.Validate() != nil) != tt.wantErr {
				t.Fatalf("PolicyRequest.Validate got %v; want error %v", r.Validate(), tt.wantErr)
			}
			if r, ok := tt.give.(schemas.ContextRequest); ok && (r.Validate() != nil) != tt.wantErr {
				t.Fatalf("ContextRequest.Validate got %v; want error %v", r.Validate(), tt.wantErr)
			}
		})
	}
}

func ExampleCompactRequest_Validate() {
	r := schemas.CompactRequest{Conversation: "support-42", RequestID: "job/1"}
	err := r.Validate()
	var ve *schemas.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Field)
	fmt.Println(err)
	// Output:
	// true request_id
	// request_id: character '/' at position 3 is not allowed; use only [A-Za-z0-9_-] (1-128 characters)
}
