package schemas_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/compactor/compactor/schemas"
)

func TestPlaceholder(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"image", `{"type":"image_url","image_url":{"url":"https://x/y.png"}}`, "[image]"},
		{"audio", `{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}`, "[audio]"},
		{"file with name", `{"type":"file","file":{"filename":"report  final.pdf"}}`, "[file: report final.pdf]"},
		{"file without name", `{"type":"file","file":{"file_id":"f1"}}`, "[file]"},
		{"refusal", `{"type":"refusal","refusal":"I can't"}`, "[refusal: I can't]"},
		{"unknown", `{"type":"hologram"}`, "[hologram]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts, err := schemas.Parts(json.RawMessage(tc.give)).Parts()
			if err != nil || len(parts) != 1 {
				t.Fatalf("Parts() = %v, %v", parts, err)
			}
			if got := parts[0].Placeholder(); got != tc.want {
				t.Fatalf("got %q; want %q", got, tc.want)
			}
		})
	}
}

// TestPartsReadLikeValidate: Parts and String read a part the way Validate does, by its
// exact "type" and, of a text part only, "text". A part of another type that carries a
// "text" of any JSON type, or differently cased keys, is valid and must not make the
// message's text unreadable (found by FuzzDecodeMessage: the summarizer got
// "[unreadable content]" and the token estimate counted no content at all).
func TestPartsReadLikeValidate(t *testing.T) {
	tests := []struct {
		name  string
		give  string
		want  string   // String()
		types []string // the parts' types
	}{
		{
			name:  "non-text part with a number text",
			give:  `[{"type":"text","text":"look"},{"type":"x-new","text":5}]`,
			want:  "look",
			types: []string{"text", "x-new"},
		},
		{
			name:  "refusal with an object text",
			give:  `[{"type":"refusal","refusal":"no","text":{"a":1}},{"type":"text","text":"b"}]`,
			want:  "b",
			types: []string{"refusal", "text"},
		},
		{
			name:  "differently cased keys are not read",
			give:  `[{"type":"image_url","image_url":{"url":"u"},"Type":"text","TEXT":"hidden"},{"type":"text","text":"shown","Text":"no"}]`,
			want:  "shown",
			types: []string{"image_url", "text"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := schemas.DecodeMessage([]byte(`{"role":"user","content":` + tc.give + `}`))
			if err != nil {
				t.Fatalf("DecodeMessage: %v; want a valid message", err)
			}
			parts, err := m.Content.Parts()
			if err != nil {
				t.Fatalf("Parts() error %v; want the parts of valid content", err)
			}
			var types []string
			for _, p := range parts {
				types = append(types, p.Type)
			}
			if !reflect.DeepEqual(types, tc.types) {
				t.Errorf("types got %q; want %q", types, tc.types)
			}
			if got := m.Content.String(); got != tc.want {
				t.Errorf("String() got %q; want %q", got, tc.want)
			}
		})
	}
}

func TestTextWithPlaceholders(t *testing.T) {
	for _, tt := range []struct{ give, want string }{
		{`"plain"`, "plain"},
		{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`, "a\n[image]\nb"},
		{`null`, ""},
	} {
		var c schemas.Content
		if err := c.UnmarshalJSON([]byte(tt.give)); err != nil {
			t.Fatal(err)
		}
		if got := c.TextWithPlaceholders(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.give, got, tt.want)
		}
	}
}
