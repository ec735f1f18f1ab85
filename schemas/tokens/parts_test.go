package tokens_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// A part cannot hide bytes from the floor in its keys, its numbers or a field beside its
// text or media (an outside review found each counted as nothing under tokens: 1).
func TestFloorCountsEveryByteOfAPart(t *testing.T) {
	nums := strings.TrimSuffix(strings.Repeat("123456789,", 90_000), ",")
	bigKey := strings.Repeat("k", 900_000)
	for name, part := range map[string]string{
		"numbers in an unknown part": `{"type":"blob","data":[` + nums + `]}`,
		"a key of an unknown part":   `{"type":"blob","` + bigKey + `":1}`,
		"text beside an image":       `{"type":"image_url","image_url":{"url":"https://x/y.png"},"detail_text":"` + bigKey + `"}`,
		"extra field of a text part": `{"type":"text","text":"hi","annotations":"` + bigKey + `"}`,
	} {
		m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c", Tokens: 1,
			Content: schemas.Parts(json.RawMessage(part))}
		raw, _ := json.Marshal(m)
		f, n, st := tokens.Floor(&m), tokens.Message(&m), tokens.Estimate(&m)
		if f < len(part)/16 {
			t.Errorf("%s: %d bytes on the wire, Floor %d, Message %d, Estimate %d", name, len(raw), f, n, st)
		}
	}
}
