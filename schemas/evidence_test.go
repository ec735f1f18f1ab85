package schemas_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

func TestEvidenceValidate(t *testing.T) {
	file := schemas.EvidenceItem{Kind: schemas.EvidenceFile, Value: "a.go", Count: 1, LastSeq: 3}
	tests := []struct {
		name    string
		give    schemas.Evidence
		wantErr string
	}{
		{name: "empty", give: schemas.Evidence{}},
		{name: "one file", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{file}}},
		{name: "unknown kind", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{{Kind: "secret", Value: "x", Count: 1}}}, wantErr: "unknown kind"},
		{name: "empty value", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{{Kind: "url", Count: 1}}}, wantErr: "must not be empty"},
		{name: "long value", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{{Kind: "url", Value: strings.Repeat("x", 513), Count: 1}}}, wantErr: "over 512"},
		{name: "bad utf8", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{{Kind: "url", Value: "\xff", Count: 1}}}, wantErr: "UTF-8"},
		{name: "zero count", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{{Kind: "id", Value: "#1", LastSeq: 1}}}, wantErr: "count must be at least 1"},
		{name: "past through", give: schemas.Evidence{ThroughSeq: 2, Items: []schemas.EvidenceItem{file}}, wantErr: "past through_seq"},
		{name: "changed command", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{{Kind: "command", Value: "ls", Count: 1, Changed: true}}}, wantErr: "only a file"},
		{name: "twice", give: schemas.Evidence{ThroughSeq: 3, Items: []schemas.EvidenceItem{file, file}}, wantErr: "listed twice"},
		{name: "too many", give: schemas.Evidence{ThroughSeq: 3, Items: make([]schemas.EvidenceItem, schemas.MaxEvidenceItems+1)}, wantErr: "at most 2000 items"},
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
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, schemas.ErrInvalid) {
				t.Fatalf("got %v; want an ErrInvalid containing %q", err, tt.wantErr)
			}
		})
	}
}
