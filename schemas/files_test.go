package schemas_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
)

const draft202012 = "https://json-schema.org/draft/2020-12/schema"

// loadSchemas reads every embedded schema file, by file name.
func loadSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	names, err := fs.Glob(schemas.Files, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, name := range names {
		b, err := schemas.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s is not a JSON object: %v", name, err)
		}
		out[name] = doc
	}
	return out
}

func TestFilesAreSchemas(t *testing.T) {
	docs := loadSchemas(t)
	want := []string{"dead-letter.v1.json", "event.v1.json", "message.v1.json", "policy.v1.json", "request.v1.json", "result.v1.json",
		"service-compact-request.v1.json", "service-compact-response.v1.json", "service-context-request.v1.json", "service-context-response.v1.json",
		"service-conversation-request.v1.json", "service-forget-request.v1.json", "service-forget-response.v1.json",
		"service-policy-request.v1.json", "service-policy-response.v1.json",
		"service-recall-request.v1.json", "service-recall-response.v1.json",
		"service-status-response.v1.json", "tombstone.v1.json"}
	got := make([]string, 0, len(docs))
	for name := range docs {
		got = append(got, name)
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("schema files got %v; want %v", got, want)
	}
	for name, doc := range docs {
		if doc["$schema"] != draft202012 {
			t.Errorf("%s: $schema got %v; want %s", name, doc["$schema"], draft202012)
		}
		id, _ := doc["$id"].(string)
		if !strings.HasPrefix(id, "https://") || !strings.HasSuffix(id, "/"+name) {
			t.Errorf("%s: $id got %q; want an absolute URL ending in /%s", name, id, name)
		}
		if doc["title"] == nil || doc["type"] != "object" {
			t.Errorf("%s: want a title and type object", name)
		}
	}
}

// TestSchemaPropertiesMatchGoTypes keeps the schema files and the Go types from drifting:
// every object schema lists exactly the JSON field names of its Go type. For the
// payloads Compactor writes itself, "required" lists exactly the fields Go always writes
// (those without omitempty).
func TestSchemaPropertiesMatchGoTypes(t *testing.T) {
	docs := loadSchemas(t)
	tests := []struct {
		name         string
		file         string
		def          string // "" for the root schema, else a $defs name
		give         reflect.Type
		wantRequired bool
	}{
		{name: "message", file: "message.v1.json", give: reflect.TypeFor[schemas.Message]()},
		{name: "tool call", file: "message.v1.json", def: "tool_call", give: reflect.TypeFor[schemas.ToolCall]()},
		{name: "function call", file: "message.v1.json", def: "function_call", give: reflect.TypeFor[schemas.FunctionCall]()},
		{name: "message usage", file: "message.v1.json", def: "usage", give: reflect.TypeFor[schemas.Usage]()},
		{name: "content ref", file: "message.v1.json", def: "content_ref", give: reflect.TypeFor[schemas.ContentRef](), wantRequired: true},
		{name: "request", file: "request.v1.json", give: reflect.TypeFor[schemas.Request](), wantRequired: true},
		{name: "result", file: "result.v1.json", give: reflect.TypeFor[schemas.Result](), wantRequired: true},
		{name: "override", file: "result.v1.json", def: "override", give: reflect.TypeFor[schemas.Override](), wantRequired: true},
		{name: "result usage", file: "result.v1.json", def: "usage", give: reflect.TypeFor[schemas.Usage](), wantRequired: true},
		{name: "evidence", file: "result.v1.json", def: "evidence", give: reflect.TypeFor[schemas.Evidence](), wantRequired: true},
		{name: "evidence item", file: "result.v1.json", def: "evidence_item", give: reflect.TypeFor[schemas.EvidenceItem](), wantRequired: true},
		{name: "event", file: "event.v1.json", give: reflect.TypeFor[schemas.Event](), wantRequired: true},
		{name: "event hole", file: "event.v1.json", def: "hole", give: reflect.TypeFor[schemas.Hole](), wantRequired: true},
		{name: "result hole", file: "result.v1.json", def: "hole", give: reflect.TypeFor[schemas.Hole](), wantRequired: true},
		{name: "result witness", file: "result.v1.json", def: "witness", give: reflect.TypeFor[schemas.Witness](), wantRequired: true},
		{name: "request witness", file: "request.v1.json", def: "witness", give: reflect.TypeFor[schemas.Witness](), wantRequired: true},
		{name: "dead letter", file: "dead-letter.v1.json", give: reflect.TypeFor[schemas.DeadLetter](), wantRequired: true},
		{name: "compact request", file: "service-compact-request.v1.json", give: reflect.TypeFor[schemas.CompactRequest](), wantRequired: true},
		{name: "compact response", file: "service-compact-response.v1.json", give: reflect.TypeFor[schemas.CompactResponse](), wantRequired: true},
		{name: "conversation request", file: "service-conversation-request.v1.json", give: reflect.TypeFor[schemas.ConversationRequest](), wantRequired: true},
		{name: "context request", file: "service-context-request.v1.json", give: reflect.TypeFor[schemas.ContextRequest](), wantRequired: true},
		{name: "context response", file: "service-context-response.v1.json", give: reflect.TypeFor[schemas.ContextResponse](), wantRequired: true},
		{name: "status response", file: "service-status-response.v1.json", give: reflect.TypeFor[schemas.ConversationStatus](), wantRequired: true},
		{name: "policy request", file: "service-policy-request.v1.json", give: reflect.TypeFor[schemas.PolicyRequest](), wantRequired: true},
		{name: "policy response", file: "service-policy-response.v1.json", give: reflect.TypeFor[schemas.PolicyResponse](), wantRequired: true},
		{name: "forget request", file: "service-forget-request.v1.json", give: reflect.TypeFor[schemas.ForgetRequest](), wantRequired: true},
		{name: "forget response", file: "service-forget-response.v1.json", give: reflect.TypeFor[schemas.ForgetResponse](), wantRequired: true},
		{name: "forget counts", file: "service-forget-response.v1.json", def: "counts", give: reflect.TypeFor[schemas.ForgetCounts](), wantRequired: true},
		{name: "recall request", file: "service-recall-request.v1.json", give: reflect.TypeFor[schemas.RecallRequest](), wantRequired: false},
		{name: "recall response", file: "service-recall-response.v1.json", give: reflect.TypeFor[schemas.RecallResponse](), wantRequired: true},
		{name: "tombstone", file: "tombstone.v1.json", give: reflect.TypeFor[schemas.Tombstone](), wantRequired: true},
	}
	// $defs that describe no Go type of their own.
	// (recalled_message is message.v1.json plus seq: TestRecalledMessageJSON checks it.)
	untyped := map[string]bool{"message.v1.json#content_part": true, "request.v1.json#conversation": true,
		"service-recall-response.v1.json#recalled_message": true}
	covered := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := docs[tt.file]
			if tt.def != "" {
				defs, _ := s["$defs"].(map[string]any)
				s, _ = defs[tt.def].(map[string]any)
				covered[tt.file+"#"+tt.def] = true
			}
			if s == nil {
				t.Fatalf("%s has no schema %q", tt.file, tt.def)
			}
			props, _ := s["properties"].(map[string]any)
			var gotProps []string
			for k := range props {
				gotProps = append(gotProps, k)
			}
			sort.Strings(gotProps)
			wantProps, wantReq := jsonFields(tt.give)
			if !slices.Equal(gotProps, wantProps) {
				t.Errorf("properties got %v; want the JSON fields of %v: %v", gotProps, tt.give, wantProps)
			}
			if !tt.wantRequired {
				return
			}
			var gotReq []string
			for _, r := range s["required"].([]any) {
				gotReq = append(gotReq, r.(string))
			}
			sort.Strings(gotReq)
			if !slices.Equal(gotReq, wantReq) {
				t.Errorf("required got %v; want the fields %v always writes: %v", gotReq, tt.give, wantReq)
			}
		})
	}
	for file, doc := range docs {
		defs, _ := doc["$defs"].(map[string]any)
		for def := range defs {
			if k := file + "#" + def; !covered[k] && !untyped[k] {
				t.Errorf("%s: $defs/%s is matched to no Go type in this test", file, def)
			}
		}
	}
}

// jsonFields returns the sorted JSON names of t's encoded fields and those without omitempty.
func jsonFields(t reflect.Type) (all, always []string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !strings.Contains(","+opts+",", ",omitempty,") {
			always = append(always, name)
		}
	}
	sort.Strings(all)
	sort.Strings(always)
	return all, always
}

// TestMessageSchemaAgreesWithValidate runs every message case through both the JSON
// Schema and DecodeMessage: a client that validates with the schema must keep and skip
// the same messages as the Go reader.
func TestMessageSchemaAgreesWithValidate(t *testing.T) {
	v := newValidator(t)
	for _, tt := range messageCases {
		t.Run(tt.name, func(t *testing.T) {
			_, goErr := schemas.DecodeMessage([]byte(tt.give))
			schemaErr := v.validateJSON("message.v1.json", []byte(tt.give))
			if tt.goOnly {
				if goErr == nil || schemaErr != nil {
					t.Fatalf("Go error %v, schema error %v; want only Go to refuse", goErr, schemaErr)
				}
				return
			}
			if (goErr == nil) != (schemaErr == nil) {
				t.Fatalf("Go error %v; schema error %v; want both nil or both set", goErr, schemaErr)
			}
		})
	}
}

// TestSchemasAcceptGoOutput checks that what the Go types write is valid under their
// schema, and that a request Go refuses the schema refuses too.
func TestSchemasAcceptGoOutput(t *testing.T) {
	v := newValidator(t)
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	req := schemas.Request{RequestID: "r1", Conversation: "c_1", Trigger: schemas.TriggerManual, Reason: "asked",
		Instructions: "keep paths", RequestedAt: at, UpToSeq: 42}
	gen := uint64(1)
	tests := []struct {
		name    string
		file    string
		give    any
		wantErr bool
	}{
		{name: "request", file: "request.v1.json", give: req},
		{name: "minimal request", file: "request.v1.json", give: schemas.Request{RequestID: "r", Conversation: "c", Trigger: "budget"}},
		{name: "request bad conversation", file: "request.v1.json", give: schemas.Request{RequestID: "r", Conversation: "c.d", Trigger: "budget"}, wantErr: true},
		{name: "request 129 char conversation", file: "request.v1.json", give: schemas.Request{RequestID: "r", Conversation: strings.Repeat("c", 129), Trigger: "budget"}, wantErr: true},
		{name: "request no id", file: "request.v1.json", give: schemas.Request{Conversation: "c", Trigger: "budget"}, wantErr: true},
		{name: "request bad trigger", file: "request.v1.json", give: schemas.Request{RequestID: "r", Conversation: "c", Trigger: "x"}, wantErr: true},
		{name: "zero result", file: "result.v1.json", give: schemas.Result{SchemaVersion: 1, Conversation: "c"}},
		{name: "full result", file: "result.v1.json", give: schemas.Result{
			SchemaVersion: 1, Conversation: "c", Generation: 2, Summary: "s", SummaryRole: schemas.RoleSystem,
			TailStartSeq: 9, CoveredThroughSeq: 8, PinnedSeqs: []uint64{1}, Overrides: []schemas.Override{{Seq: 9, KeepHead: 1, KeepTail: 2, Note: "n"}},
			Strategy: "last_n", Trigger: "budget", Reason: "r", RequestID: "q", RequestSeq: 3, LLMBaseGeneration: 1,
			Fallback: true, Model: "m", PromptHash: "h", TokensBefore: 9, TokensAfter: 3, MessagesBefore: 5, MessagesAfter: 2,
			Usage: &schemas.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, DeclinedAtSeq: 7, LoadedThroughSeq: 12, FirstSeq: 1, CreatedAt: at,
			EvidenceText: "[Evidence]", Evidence: &schemas.Evidence{ThroughSeq: 8, Items: []schemas.EvidenceItem{
				{Kind: schemas.EvidenceFile, Value: "a.go", Count: 2, LastSeq: 7, Changed: true}, {Kind: schemas.EvidenceCommand, Value: "go test", Count: 1, LastSeq: 8}}},
			Unknown: map[string]json.RawMessage{"future": json.RawMessage(`{"x":1}`)},
		}},
		{name: "result evidence unknown kind", file: "result.v1.json", give: schemas.Result{SchemaVersion: 1, Conversation: "c",
			Evidence: &schemas.Evidence{Items: []schemas.EvidenceItem{{Kind: "secret", Value: "x", Count: 1}}}}, wantErr: true},
		{name: "newer result", file: "result.v1.json", give: schemas.Result{SchemaVersion: 2, Conversation: "c"}, wantErr: true},
		{name: "event", file: "event.v1.json", give: schemas.Event{Type: schemas.EventCompleted, Conversation: "c", RequestID: "r",
			Generation: 1, Trigger: schemas.TriggerBudget, Reason: "r", TokensBefore: 9, TokensAfter: 3, DurationMS: 12, At: at}},
		{name: "failed event", file: "event.v1.json", give: schemas.Event{Type: schemas.EventFailed, Conversation: "c", RequestID: "r", Error: "boom", At: at}},
		{name: "event unknown type", file: "event.v1.json", give: schemas.Event{Type: "exploded", Conversation: "c", At: at}, wantErr: true},
		{name: "forgotten event", file: "event.v1.json", give: schemas.Event{Type: schemas.EventForgotten, Conversation: "c", RequestID: "r", At: at}},
		{name: "tombstone", file: "tombstone.v1.json", give: schemas.Tombstone{ThroughSeq: 42, ForgottenAt: at}},
		{name: "tombstone without sequence", file: "tombstone.v1.json", give: map[string]any{"forgotten_at": at}, wantErr: true},
		{name: "dead letter", file: "dead-letter.v1.json", give: schemas.DeadLetter{Request: req, Error: "llm down", Attempts: 5, At: at}},
		{name: "dead letter bad request", file: "dead-letter.v1.json", give: schemas.DeadLetter{Request: schemas.Request{Conversation: "c"}, At: at}, wantErr: true},
		{name: "message", file: "message.v1.json", give: schemas.Message{Role: schemas.RoleTool, Content: schemas.Text("x"), ToolCallID: "c",
			Tokens: 3, Usage: &schemas.Usage{PromptTokens: 1}, ContextGeneration: &gen, Meta: map[string]string{"pin": "true"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			err = v.validateJSON(tt.file, b)
			if (err != nil) != tt.wantErr {
				t.Fatalf("schema error %v for %s; want error %v", err, b, tt.wantErr)
			}
			if r, ok := tt.give.(schemas.Request); ok && (r.Validate() != nil) != tt.wantErr {
				t.Fatalf("Request.Validate got %v; want error %v", r.Validate(), tt.wantErr)
			}
		})
	}
}

// validator checks instances against the subset of JSON Schema 2020-12 the schema files
// use. A keyword it does not know fails the test, so a schema cannot rely on an
// unchecked rule.
type validator struct {
	t    *testing.T
	docs map[string]map[string]any
}

func newValidator(t *testing.T) *validator { return &validator{t: t, docs: loadSchemas(t)} }

func (v *validator) validateJSON(file string, data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var inst any
	if err := dec.Decode(&inst); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	doc, ok := v.docs[file]
	if !ok {
		v.t.Fatalf("no schema %s", file)
	}
	return v.validate(file, doc, inst, "")
}

var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$defs": true, "title": true, "description": true,
	"format": true,               // an annotation only, by default, in 2020-12
	"then":   true, "else": true, // read with "if"
}

func (v *validator) validate(file string, s map[string]any, inst any, path string) error {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := v.keyword(file, s, k, inst, path); err != nil {
			return err
		}
	}
	return nil
}

func (v *validator) keyword(file string, s map[string]any, k string, inst any, path string) error {
	val := s[k]
	sub := func(x any) map[string]any {
		m, ok := x.(map[string]any)
		if !ok {
			v.t.Fatalf("%s%s: %s is not a schema object", file, path, k)
		}
		return m
	}
	list := func(x any) []any {
		l, ok := x.([]any)
		if !ok {
			v.t.Fatalf("%s%s: %s is not an array", file, path, k)
		}
		return l
	}
	switch k {
	case "$ref":
		ref := val.(string)
		if def, ok := strings.CutPrefix(ref, "#/$defs/"); ok {
			defs := sub(v.docs[file]["$defs"])
			return v.validate(file, sub(defs[def]), inst, path)
		}
		doc, ok := v.docs[ref]
		if !ok {
			v.t.Fatalf("%s: $ref %q resolves to no embedded file", file, ref)
		}
		return v.validate(ref, doc, inst, path)
	case "type":
		types := []any{val}
		if l, ok := val.([]any); ok {
			types = l
		}
		for _, ty := range types {
			if hasType(inst, ty.(string)) {
				return nil
			}
		}
		return fmt.Errorf("%s: %v is not of type %v", path, inst, val)
	case "enum":
		for _, e := range list(val) {
			if jsonEqual(inst, e) {
				return nil
			}
		}
		return fmt.Errorf("%s: %v is not one of %v", path, inst, val)
	case "const":
		if !jsonEqual(inst, val) {
			return fmt.Errorf("%s: %v is not %v", path, inst, val)
		}
	case "pattern":
		if str, ok := inst.(string); ok && !regexp.MustCompile(val.(string)).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", path, str, val)
		}
	case "minLength":
		if str, ok := inst.(string); ok && utf8.RuneCountInString(str) < toInt(val) {
			return fmt.Errorf("%s: %q is shorter than %v", path, str, val)
		}
	case "minimum":
		if n, ok := inst.(json.Number); ok && toRat(n).Cmp(toRat(val.(json.Number))) < 0 {
			return fmt.Errorf("%s: %v is below %v", path, n, val)
		}
	case "maximum":
		if n, ok := inst.(json.Number); ok && toRat(n).Cmp(toRat(val.(json.Number))) > 0 {
			return fmt.Errorf("%s: %v is above %v", path, n, val)
		}
	case "minItems":
		if l, ok := inst.([]any); ok && len(l) < toInt(val) {
			return fmt.Errorf("%s: fewer than %v items", path, val)
		}
	case "items":
		if l, ok := inst.([]any); ok {
			for i, x := range l {
				if err := v.validate(file, sub(val), x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case "required":
		if obj, ok := inst.(map[string]any); ok {
			for _, r := range list(val) {
				if _, ok := obj[r.(string)]; !ok {
					return fmt.Errorf("%s: %s is required", path, r)
				}
			}
		}
	case "properties":
		if obj, ok := inst.(map[string]any); ok {
			props := sub(val)
			for name, ps := range props {
				if x, ok := obj[name]; ok {
					if err := v.validate(file, sub(ps), x, path+"."+name); err != nil {
						return err
					}
				}
			}
		}
	case "additionalProperties":
		obj, ok := inst.(map[string]any)
		if !ok {
			return nil
		}
		props, _ := s["properties"].(map[string]any)
		for name, x := range obj {
			if _, declared := props[name]; declared {
				continue
			}
			switch ap := val.(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: %s is not allowed", path, name)
				}
			default:
				if err := v.validate(file, sub(ap), x, path+"."+name); err != nil {
					return err
				}
			}
		}
	case "allOf":
		for _, x := range list(val) {
			if err := v.validate(file, sub(x), inst, path); err != nil {
				return err
			}
		}
	case "anyOf":
		for _, x := range list(val) {
			if v.validate(file, sub(x), inst, path) == nil {
				return nil
			}
		}
		return fmt.Errorf("%s: matches none of anyOf", path)
	case "not":
		if v.validate(file, sub(val), inst, path) == nil {
			return fmt.Errorf("%s: matches a schema it must not", path)
		}
	case "if":
		branch := "else"
		if v.validate(file, sub(val), inst, path) == nil {
			branch = "then"
		}
		if b, ok := s[branch]; ok {
			return v.validate(file, sub(b), inst, path)
		}
	default:
		if !annotations[k] {
			v.t.Fatalf("%s%s: keyword %q is not checked by this test's validator", file, path, k)
		}
	}
	return nil
}

func hasType(inst any, ty string) bool {
	switch ty {
	case "null":
		return inst == nil
	case "boolean":
		_, ok := inst.(bool)
		return ok
	case "string":
		_, ok := inst.(string)
		return ok
	case "array":
		_, ok := inst.([]any)
		return ok
	case "object":
		_, ok := inst.(map[string]any)
		return ok
	case "number":
		_, ok := inst.(json.Number)
		return ok
	case "integer":
		n, ok := inst.(json.Number)
		return ok && toRat(n).IsInt()
	}
	panic("unknown type " + ty)
}

func toRat(n json.Number) *big.Rat {
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		panic("bad number " + n)
	}
	return r
}

func toInt(x any) int {
	r := toRat(x.(json.Number))
	return int(r.Num().Int64())
}

func jsonEqual(a, b any) bool {
	na, aNum := a.(json.Number)
	nb, bNum := b.(json.Number)
	if aNum || bNum {
		return aNum && bNum && toRat(na).Cmp(toRat(nb)) == 0
	}
	return reflect.DeepEqual(a, b)
}
