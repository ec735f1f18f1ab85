package policy

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"testing"
)

// FuzzDecodeConversation fuzzes what compactor.policy does with a stored conversation
// policy and a change: DecodeConversation, Merge, Resolve, EncodeConversation. Oracles:
// nothing panics; every error is an ErrPolicy; a decoded or merged policy holds only
// keys a conversation may set; Merge is clear-then-set (an empty value removes the key)
// and leaves its inputs alone; and a policy that resolves can be stored: it encodes, and
// decodes back to the same keys resolving to the same settings.
func FuzzDecodeConversation(f *testing.F) {
	for _, s := range []struct {
		stored, set string
		clear       bool
	}{
		{`{"schema_version":1,"strategy":"tool-rounds","tool_rounds":3,"threshold":0.7}`, `{"threshold":"0.8"}`, false},
		{`{"profile":"cheap","instructions":"keep file paths"}`, `{"profile":""}`, false},
		{`{"keep_last_n":"12","idle_after":"10m"}`, `{"token_fraction":"0.25","strategy":"token-fraction"}`, true},
		{`{"llm_base_url":"http://x"}`, `{}`, false},
		{`{"threshold":true}`, `{"llm_model":"gpt"}`, false},
		{`{"context_window":1e5,"target":"0.4"}`, `{"nope":"1"}`, false},
		{`[1]`, `{"summary_role":"system"}`, true},
	} {
		f.Add([]byte(s.stored), []byte(s.set), s.clear)
	}
	r, err := NewResolver(nil, &File{Profiles: map[string]map[string]any{"cheap": {"llm_model": "small"}}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stored, setJSON []byte, clear bool) {
		current, err := DecodeConversation(stored)
		if err != nil {
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("DecodeConversation(%q) error %v; want an ErrPolicy", stored, err)
			}
			current = nil
		} else {
			if err := CheckConversation(current); err != nil {
				t.Fatalf("DecodeConversation(%q) = %v, which CheckConversation refuses: %v", stored, current, err)
			}
			checkStorable(t, r, current)
		}
		var set Layer
		if json.Unmarshal(setJSON, &set) != nil {
			return
		}
		before, beforeSet := maps.Clone(current), maps.Clone(set)
		next, err := Merge(current, clear, set)
		if !reflect.DeepEqual(current, before) || !reflect.DeepEqual(set, beforeSet) {
			t.Fatalf("Merge changed its inputs")
		}
		want := Layer{}
		if !clear {
			maps.Copy(want, current)
		}
		for k, v := range set {
			if v == "" {
				delete(want, k)
			} else {
				want[k] = v
			}
		}
		if wantErr := CheckConversation(want); (err != nil) != (wantErr != nil) {
			t.Fatalf("Merge(%v, %v, %v) error %v; want an error: %v", current, clear, set, err, wantErr != nil)
		}
		if err != nil {
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("Merge error %v; want an ErrPolicy", err)
			}
			return
		}
		if !reflect.DeepEqual(next, want) {
			t.Fatalf("Merge(%v, %v, %v) = %v; want %v", current, clear, set, next, want)
		}
		checkStorable(t, r, next)
	})
}

// checkStorable checks that a conversation policy that resolves can be written to KV
// and read back to the same settings, as compactor.policy does.
func checkStorable(t *testing.T, r *Resolver, l Layer) {
	t.Helper()
	s, err := r.Resolve(l)
	if err != nil {
		if !errors.Is(err, ErrPolicy) {
			t.Fatalf("Resolve(%v) error %v; want an ErrPolicy", l, err)
		}
		return
	}
	enc, err := EncodeConversation(l)
	if err != nil {
		t.Fatalf("policy %q resolves, yet EncodeConversation refuses it: %v", l, err)
	}
	back, err := DecodeConversation(enc)
	if err != nil {
		t.Fatalf("EncodeConversation(%q) wrote %s, which DecodeConversation refuses: %v", l, enc, err)
	}
	if len(back) != len(l) {
		t.Fatalf("EncodeConversation(%q) wrote %s, which decodes to %q; want the same keys", l, enc, back)
	}
	s2, err := r.Resolve(back)
	if err != nil || !reflect.DeepEqual(s2, s) {
		t.Fatalf("policy %q stored as %s resolves to %+v (%v); want %+v", l, enc, s2, err, s)
	}
}
