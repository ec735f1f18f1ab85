package wire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// errNotObject, errDuplicateKey: why a body cannot be edited field by field.
var (
	errNotObject    = errors.New("the body is not a JSON object")
	errDuplicateKey = errors.New("the body has a duplicate top-level field")
)

// TopField is one top-level field of a JSON object, located in the body.
type TopField struct {
	// Key is the field name, unescaped.
	Key string
	// Start is the offset of the field's name (its opening quote); VStart and VEnd
	// delimit its value.
	Start, VStart, VEnd int
}

// TopFields lists the top-level fields of body in order. It refuses a body that is not
// one valid JSON object, and an object that names a field twice (exact names, after
// unescaping): two readers could take different ones.
func TopFields(body []byte) ([]TopField, error) {
	if !json.Valid(body) {
		return nil, errors.New("the body is not valid JSON")
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, errNotObject
	}
	i++
	var fields []TopField
	seen := map[string]bool{}
	for {
		i = skipSpace(body, i)
		if body[i] == '}' {
			return fields, nil
		}
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		kend := skipString(body, i)
		var key string
		if err := json.Unmarshal(body[i:kend], &key); err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("%w: %q", errDuplicateKey, key)
		}
		seen[key] = true
		v := skipSpace(body, kend)
		v = skipSpace(body, v+1) // past ':'
		vend := skipValue(body, v)
		fields = append(fields, TopField{Key: key, Start: i, VStart: v, VEnd: vend})
		i = vend
	}
}

// FieldMap returns the raw value of each top-level field of body.
func FieldMap(body []byte) (map[string]json.RawMessage, error) {
	fields, err := TopFields(body)
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		out[f.Key] = body[f.VStart:f.VEnd]
	}
	return out, nil
}

// Edit is one change to a top-level field: Value replaces the field's value (or is
// inserted as a new field when absent); a nil Value removes the field.
type Edit struct {
	Key   string
	Value json.RawMessage
}

// SetFields returns body with the edits applied and every other byte as sent: key
// order, spacing and the other fields' values. A replaced field keeps its place; a new
// one is added at the end, in the order given. It refuses a body that is not a JSON
// object or that names a field twice. The values must be valid JSON (not checked).
func SetFields(body []byte, edits ...Edit) ([]byte, error) {
	fields, err := TopFields(body)
	if err != nil {
		return nil, err
	}
	pending := make(map[string]json.RawMessage, len(edits))
	for _, e := range edits {
		pending[e.Key] = e.Value
	}
	out := make([]byte, 0, len(body)+editsSize(edits))
	last := 0 // body bytes before last are written
	kept := 0 // fields written so far
	for i, f := range fields {
		v, ok := pending[f.Key]
		if !ok {
			kept++
			continue
		}
		delete(pending, f.Key)
		if v != nil {
			out = append(out, body[last:f.VStart]...)
			out = append(out, v...)
			last = f.VEnd
			kept++
			continue
		}
		// Removed: drop the field and one separating comma.
		out = append(out, body[last:removeFrom(body, fields, i, kept)]...)
		last = removeTo(body, fields, i, kept)
	}
	end := closingBrace(body)
	out = append(out, body[last:end]...)
	for _, e := range edits {
		v, ok := pending[e.Key]
		if !ok || v == nil {
			continue
		}
		delete(pending, e.Key)
		if kept > 0 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(e.Key)
		out = append(out, k...)
		out = append(out, ':')
		out = append(out, v...)
		kept++
	}
	return append(out, body[end:]...), nil
}

// removeFrom and removeTo delimit the bytes removed with field i: from the comma
// before it to its value's end when a kept field precedes it, else from its name to
// just after the comma that follows it (when one does).
func removeFrom(body []byte, fields []TopField, i, kept int) int {
	if kept > 0 {
		return fields[i-1].VEnd
	}
	return fields[i].Start
}

func removeTo(body []byte, fields []TopField, i, kept int) int {
	if kept > 0 || i+1 == len(fields) {
		return fields[i].VEnd
	}
	return fields[i+1].Start
}

// closingBrace returns the offset of the object's closing brace.
func closingBrace(body []byte) int {
	for i := len(body) - 1; i >= 0; i-- {
		if body[i] == '}' {
			return i
		}
	}
	return len(body)
}

func editsSize(edits []Edit) int {
	n := 0
	for _, e := range edits {
		n += len(e.Key) + len(e.Value) + 4
	}
	return n
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the JSON string starting at b[i] (a quote).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the offset just past the JSON value starting at b[i], in a body
// json.Valid has accepted.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}
