package corpustest

import (
	"bytes"
	"errors"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// FuzzMaxEntries bounds the conversations FuzzEntries builds.
const FuzzMaxEntries = 48

// FuzzEntries builds a conversation from fuzz bytes, the way a reader would load it:
// each op byte adds one entry (a message of its low three bits' kind, pinned with bit
// 3, with a producer token count with bit 4, after a sequence gap with bit 7), taking
// more bytes for its size and call ids; kind 5 takes the next line of jsonl through
// DecodeMessage. A message that breaks the wire contract is an entry with Err, as a
// reader stores it. Call ids come from four names, so rounds interleave, repeat and
// go unanswered. The fuzz targets of schemas/assemble and summarizer/split share it, so
// one seed means the same conversation to both.
func FuzzEntries(ops, jsonl []byte) []schemas.Entry {
	lines := bytes.Split(jsonl, []byte("\n"))
	next := func() byte {
		if len(ops) == 0 {
			return 0
		}
		b := ops[0]
		ops = ops[1:]
		return b
	}
	text := func() schemas.Content {
		n := int(next())
		return schemas.Text(strings.Repeat(string(rune('a'+n%26)), n*n/8))
	}
	id := func() string { return "call_" + string(rune('a'+next()%4)) }
	var es []schemas.Entry
	var seq uint64
	for len(ops) > 0 && len(es) < FuzzMaxEntries {
		op := next()
		seq += 1 + uint64(op>>7)
		var m schemas.Message
		var decodeErr error
		switch op & 7 {
		case 0:
			m = schemas.Message{Role: schemas.RoleUser, Content: text()}
		case 1:
			m = schemas.Message{Role: schemas.RoleAssistant, Content: text()}
		case 2:
			m = schemas.Message{Role: schemas.RoleSystem, Content: text()}
		case 3:
			m = schemas.Message{Role: schemas.RoleAssistant}
			for n := 1 + int(next()%3); n > 0; n-- {
				m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id(), Type: "function",
					Function: schemas.FunctionCall{Name: "run", Arguments: `{"n":1}`}})
			}
		case 4:
			m = schemas.Message{Role: schemas.RoleTool, ToolCallID: id(), Content: text()}
		case 5:
			if len(lines) == 0 {
				m = schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("no line left")}
				break
			}
			m, decodeErr = schemas.DecodeMessage(lines[0])
			lines = lines[1:]
		case 6:
			decodeErr = errors.New("payload is not a message")
		case 7:
			m = schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(
				[]byte(`{"type":"image_url","image_url":{"url":"data:,x"}}`),
				[]byte(`{"type":"text","text":"`+strings.Repeat("p", int(next())*8)+`"}`))}
		}
		if decodeErr == nil {
			if op&8 != 0 {
				m.Meta = map[string]string{schemas.MetaPin: "true"}
			}
			if op&16 != 0 {
				m.Tokens = int(next()) * 8
			}
			decodeErr = m.Validate()
		}
		if decodeErr != nil {
			es = append(es, schemas.Entry{Seq: seq, Err: decodeErr})
			continue
		}
		es = append(es, schemas.Entry{Seq: seq, Message: m})
	}
	return es
}
