package schemas_test

import (
	"encoding/json"
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
