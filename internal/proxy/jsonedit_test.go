package proxy

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestSetFields(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		edits []edit
		want  string
	}{
		{"replace keeps order and spacing",
			"{ \"model\" : \"m\",\n  \"messages\": [1, 2],\t\"stream\":true }",
			[]edit{{"messages", json.RawMessage(`[3]`)}},
			"{ \"model\" : \"m\",\n  \"messages\": [3],\t\"stream\":true }"},
		{"insert at the end",
			`{"model":"m"}`,
			[]edit{{"system", json.RawMessage(`"s"`)}},
			`{"model":"m","system":"s"}`},
		{"insert into an empty object",
			`{ }`,
			[]edit{{"a", json.RawMessage(`1`)}, {"b", json.RawMessage(`2`)}},
			`{ "a":1,"b":2}`},
		{"remove the first",
			`{"system": "x", "messages":[]}`,
			[]edit{{"system", nil}},
			`{"messages":[]}`},
		{"remove the last",
			`{"messages":[], "system": "x" }`,
			[]edit{{"system", nil}},
			`{"messages":[] }`},
		{"remove a middle one",
			`{"a":1,"system":"x","b":2}`,
			[]edit{{"system", nil}},
			`{"a":1,"b":2}`},
		{"remove the only one",
			`{"system":"x"}`,
			[]edit{{"system", nil}},
			`{}`},
		{"remove two in a row then insert",
			`{"a":1,"b":2,"c":3}`,
			[]edit{{"a", nil}, {"b", nil}, {"d", json.RawMessage(`4`)}},
			`{"c":3,"d":4}`},
		{"remove an absent field is nothing",
			`{"a":1}`,
			[]edit{{"z", nil}},
			`{"a":1}`},
		{"nested strings with braces and quotes",
			`{"metadata":{"note":"}\"{[","x":[{"y":"]"}]},"messages":["{\"role\":1}"],"tail":"\\"}`,
			[]edit{{"messages", json.RawMessage(`[]`)}},
			`{"metadata":{"note":"}\"{[","x":[{"y":"]"}]},"messages":[],"tail":"\\"}`},
		{"an escaped key is the same key",
			`{"\u006dessages":[1]}`,
			[]edit{{"messages", json.RawMessage(`[2]`)}},
			`{"\u006dessages":[2]}`},
		{"literals and numbers",
			`{"t":true,"n":null,"f":-1.5e3,"messages":0}`,
			[]edit{{"messages", json.RawMessage(`[]`)}},
			`{"t":true,"n":null,"f":-1.5e3,"messages":[]}`},
		{"surrounding whitespace is kept",
			" \n{\"messages\":1}\n",
			[]edit{{"messages", json.RawMessage(`2`)}, {"system", json.RawMessage(`"s"`)}},
			" \n{\"messages\":2,\"system\":\"s\"}\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := setFields([]byte(c.body), c.edits...)
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
		_, err := setFields([]byte(c.body), edit{"messages", json.RawMessage(`[]`)})
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
	got, err := setFields([]byte(`{"Messages":[1]}`), edit{"messages", json.RawMessage(`[2]`)})
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
		got, err := setFields([]byte(body), edit{"messages", json.RawMessage(`["m"]`)}, edit{"system", nil})
		if err != nil {
			return
		}
		m, err := fieldMap(got)
		if err != nil {
			t.Fatalf("edited body %q: %v", got, err)
		}
		if string(m["messages"]) != `["m"]` {
			t.Fatalf("messages %s in %q", m["messages"], got)
		}
		if _, ok := m["system"]; ok {
			t.Fatalf("system kept in %q", got)
		}
		before, _ := fieldMap([]byte(body))
		for k, v := range before {
			if k != "messages" && k != "system" && string(m[k]) != string(v) {
				t.Fatalf("field %q changed: %s -> %s", k, v, m[k])
			}
		}
	})
}
