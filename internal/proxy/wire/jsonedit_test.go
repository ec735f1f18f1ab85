package wire

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestSetFields(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		edits []Edit
		want  string
	}{
		{"replace keeps order and spacing",
			"{ \"model\" : \"m\",\n  \"messages\": [1, 2],\t\"stream\":true }",
			[]Edit{{"messages", json.RawMessage(`[3]`)}},
			"{ \"model\" : \"m\",\n  \"messages\": [3],\t\"stream\":true }"},
		{"insert at the end",
			`{"model":"m"}`,
			[]Edit{{"system", json.RawMessage(`"s"`)}},
			`{"model":"m","system":"s"}`},
		{"insert into an empty object",
			`{ }`,
			[]Edit{{"a", json.RawMessage(`1`)}, {"b", json.RawMessage(`2`)}},
			`{ "a":1,"b":2}`},
		{"remove the first",
			`{"system": "x", "messages":[]}`,
			[]Edit{{"system", nil}},
			`{"messages":[]}`},
		{"remove the last",
			`{"messages":[], "system": "x" }`,
			[]Edit{{"system", nil}},
			`{"messages":[] }`},
		{"remove a middle one",
			`{"a":1,"system":"x","b":2}`,
			[]Edit{{"system", nil}},
			`{"a":1,"b":2}`},
		{"remove the only one",
			`{"system":"x"}`,
			[]Edit{{"system", nil}},
			`{}`},
		{"remove two in a row then insert",
			`{"a":1,"b":2,"c":3}`,
			[]Edit{{"a", nil}, {"b", nil}, {"d", json.RawMessage(`4`)}},
			`{"c":3,"d":4}`},
		{"remove an absent field is nothing",
			`{"a":1}`,
			[]Edit{{"z", nil}},
			`{"a":1}`},
		{"nested strings with braces and quotes",
			`{"metadata":{"note":"}\"{[","x":[{"y":"]"}]},"messages":["{\"role\":1}"],"tail":"\\"}`,
			[]Edit{{"messages", json.RawMessage(`[]`)}},
			`{"metadata":{"note":"}\"{[","x":[{"y":"]"}]},"messages":[],"tail":"\\"}`},
		{"an escaped key is the same key",
			`{"\u006dessages":[1]}`,
			[]Edit{{"messages", json.RawMessage(`[2]`)}},
			`{"\u006dessages":[2]}`},
		{"literals and numbers",
			`{"t":true,"n":null,"f":-1.5e3,"messages":0}`,
			[]Edit{{"messages", json.RawMessage(`[]`)}},
			`{"t":true,"n":null,"f":-1.5e3,"messages":[]}`},
		{"surrounding whitespace is kept",
			" \n{\"messages\":1}\n",
			[]Edit{{"messages", json.RawMessage(`2`)}, {"system", json.RawMessage(`"s"`)}},
			" \n{\"messages\":2,\"system\":\"s\"}\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := SetFields([]byte(c.body), c.edits...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid JSON %s", got)
			}
		})
	}
}

func TestSetFieldsRefuses(t *testing.T) {
	for _, c := range []struct {
		body string
		want error
	}{
		{`{"messages":[],"messages":[1]}`, errDuplicateKey},
		{`{"messages":[],"\u006dessages":[1]}`, errDuplicateKey},
		{`[{"messages":[]}]`, errNotObject},
		{`"messages"`, errNotObject},
		{`null`, errNotObject},
		{`{"messages":[]`, nil},
		{``, nil},
		{`{"a":1}{"b":2}`, nil},
	} {
		_, err := SetFields([]byte(c.body), Edit{"messages", json.RawMessage(`[]`)})
		if err == nil {
			t.Errorf("%s: accepted", c.body)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.body, err, c.want)
		}
	}
}

// A differently cased name is another field: the API reads exact names.
func TestSetFieldsCaseIsAnotherField(t *testing.T) {
	got, err := SetFields([]byte(`{"Messages":[1]}`), Edit{"messages", json.RawMessage(`[2]`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"Messages":[1],"messages":[2]}` {
		t.Fatalf("got %s", got)
	}
}

func FuzzSetFields(f *testing.F) {
	for _, s := range []string{`{"a":1,"messages":[{"x":"}"}],"b":"\""}`, `{}`, `{"system":"s"}`, ` {"a" : [ ] } `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got, err := SetFields([]byte(body), Edit{"messages", json.RawMessage(`["m"]`)}, Edit{"system", nil})
		if err != nil {
			return
		}
		m, err := FieldMap(got)
		if err != nil {
			t.Fatalf("edited body %q: %v", got, err)
		}
		if string(m["messages"]) != `["m"]` {
			t.Fatalf("messages %s in %q", m["messages"], got)
		}
		if _, ok := m["system"]; ok {
			t.Fatalf("system kept in %q", got)
		}
		before, _ := FieldMap([]byte(body))
		for k, v := range before {
			if k != "messages" && k != "system" && string(m[k]) != string(v) {
				t.Fatalf("field %q changed: %s -> %s", k, v, m[k])
			}
		}
	})
}
