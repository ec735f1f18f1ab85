package schemas_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

const bucket = "compaction-objects"

// A message offloaded into a stub and an object comes back from them byte for byte:
// content (parts kept verbatim), reasoning, extra and unknown fields from the object,
// everything else from the stub, which alone carries role, tool rounds and metadata.
func TestOffloadRestoresByteForByte(t *testing.T) {
	gen := uint64(3)
	tests := []struct {
		name string
		give string
	}{
		{name: "tool output", give: `{"role":"tool","content":"line 1\nline 2 \u00e9","tool_call_id":"c1","tokens":9}`},
		{name: "parts, reasoning, extra, unknown", give: `{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"data:,x"}}],"name":"bot","reasoning":"why","extra":{ "sig" : "a==" },"zz":[1, 2],"refusal":null}`},
		{name: "calls with null content", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := schemas.DecodeMessage([]byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			m.Usage, m.ContextGeneration, m.Meta = &schemas.Usage{PromptTokens: 1}, &gen, map[string]string{"pin": "true"}
			want, _ := m.Encode()
			stub, object, err := m.Offload("conv-1", bucket, 7)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(object)
			ref := stub.ContentRef
			if ref == nil || ref.Bucket != bucket || ref.Name != "conv-1/"+hex.EncodeToString(sum[:]) ||
				ref.SHA256 != hex.EncodeToString(sum[:]) || ref.Size != int64(len(object)) || ref.Tokens != 7 {
				t.Fatalf("ref %+v; want bucket %s, name conv-1/<sha256>, the object's size %d and tokens 7", ref, bucket, len(object))
			}
			if stub.Role != m.Role || stub.ToolCallID != m.ToolCallID || stub.Name != m.Name || len(stub.ToolCalls) != len(m.ToolCalls) ||
				stub.Tokens != m.Tokens || stub.Usage != m.Usage || stub.Meta["pin"] != "true" || stub.ContextGeneration != m.ContextGeneration {
				t.Fatalf("stub %+v lost what it keeps of %+v", stub, m)
			}
			if stub.Reasoning != "" || stub.Extra != nil || stub.Unknown != nil || !strings.Contains(stub.Content.String(), ref.Name) {
				t.Fatalf("stub %+v keeps what the object holds, or its content does not name the object", stub)
			}
			// The stub goes over the wire and is decoded by a reader.
			enc, _ := stub.Encode()
			wire, err := schemas.DecodeMessage(enc)
			if err != nil || *wire.ContentRef != *ref {
				t.Fatalf("stub decodes to %+v, %v; want the same reference", wire.ContentRef, err)
			}
			got, err := wire.Restore(object)
			if err != nil {
				t.Fatal(err)
			}
			if enc, _ := got.Encode(); !bytes.Equal(enc, want) {
				t.Fatalf("restored %s\nwant     %s", enc, want)
			}
			// Content addressed: the same message gives the same object.
			_, again, _ := m.Offload("conv-1", bucket, 7)
			if !bytes.Equal(again, object) {
				t.Fatal("offloading the same message twice gave two objects")
			}
		})
	}
}

// Restore takes from an object only what a stub leaves out: an object that is not one,
// or that tries to change the stub's role or tool round, is refused with the object's
// name, as is one that makes an invalid message.
func TestRestoreRefusesObjectsThatAreNotTheStubs(t *testing.T) {
	m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text("x")}
	stub, _, err := m.Offload("c", bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, object, want string }{
		{"not JSON", `{"content":`, "is not a JSON object"},
		{"an array", `["x"]`, "is not a JSON object"},
		{"no content", `{"reasoning":"r"}`, "holds no content"},
		{"a role", `{"content":"x","role":"system"}`, `holds "role"`},
		{"a tool call id", `{"content":"x","tool_call_id":"c2"}`, `holds "tool_call_id"`},
		{"tool calls", `{"content":"x","tool_calls":[]}`, `holds "tool_calls"`},
		{"a reference", `{"content":"x","content_ref":null}`, `holds "content_ref"`},
		{"null content on a tool message", `{"content":null}`, "restores an invalid message"},
		{"reasoning not a string", `{"content":"x","reasoning":1}`, "reasoning must be a string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := stub.Restore([]byte(tt.object))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), stub.ContentRef.Name) {
				t.Fatalf("Restore(%s) = %v; want an error naming the object and %q", tt.object, err, tt.want)
			}
			if !errors.Is(err, schemas.ErrInvalid) {
				t.Fatalf("%v does not match ErrInvalid", err)
			}
		})
	}
	if _, err := m.Restore([]byte(`{"content":"x"}`)); err == nil {
		t.Fatal("Restore of a message that is no stub succeeded")
	}
	if _, _, err := stub.Offload("c", bucket, 1); err == nil {
		t.Fatal("Offload of a stub succeeded")
	}
}

// A reference is followed only to the reader's own bucket and to objects of the
// conversation it was published in.
func TestCheckOwner(t *testing.T) {
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("x")}
	stub, _, err := m.Offload("conv-a", bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := stub.ContentRef
	if err := ref.CheckOwner("conv-a", bucket); err != nil {
		t.Fatalf("own reference refused: %v", err)
	}
	for _, tt := range []struct{ conv, bucket, want string }{
		{"conv-b", bucket, "outside conversation"},
		{"conv", bucket, "outside conversation"}, // a prefix of conv-a is another conversation
		{"conv-a", "other", `names bucket "compaction-objects"`},
	} {
		if err := ref.CheckOwner(tt.conv, tt.bucket); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckOwner(%s, %s) = %v; want %q", tt.conv, tt.bucket, err, tt.want)
		}
	}
}

// The object of a message is a JSON object of its content and the fields that move with it.
func TestOffloadObjectShape(t *testing.T) {
	m, err := schemas.DecodeMessage([]byte(`{"role":"user","content":"hi","reasoning":"r","extra":{"a":1},"x-new":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_, object, err := m.Offload("c", bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"content":"hi","reasoning":"r","extra":{"a":1},"x-new":true}`; string(object) != want {
		t.Fatalf("object %s; want %s", object, want)
	}
	var v map[string]any
	if err := json.Unmarshal(object, &v); err != nil {
		t.Fatal(err)
	}
}
