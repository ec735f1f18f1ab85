package schemas_test

import (
	"errors"
	"fmt"

	"github.com/compactor/compactor/schemas"
)

func ExampleDecodeMessage() {
	m, err := schemas.DecodeMessage([]byte(`{"role":"assistant","content":null,` +
		`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{}"}}],` +
		`"extra":{ "signature": "c2lnbg==" }}`))
	fmt.Println(m.Role, m.ToolCalls[0].Function.Name, err)
	b, _ := m.Encode()
	fmt.Println(string(b))

	_, err = schemas.DecodeMessage([]byte(`{"role":"assistant","content":null,` +
		`"tool_calls":[{"id":"","type":"function","function":{"name":"ls"}}]}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, schemas.ErrInvalid))
	// Output:
	// assistant ls <nil>
	// {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{}"}}],"extra":{ "signature": "c2lnbg==" }}
	// tool_calls[0].id: must not be empty
	// true
}

func ExampleValidateConversationID() {
	fmt.Println(schemas.ValidateConversationID("support-ticket_42"))
	fmt.Println(schemas.ValidateConversationID("support.ticket.42"))
	// Output:
	// <nil>
	// conversation: character '.' at position 7 is not allowed; use only [A-Za-z0-9_-] (1-128 characters)
}

func ExampleDecodeResult() {
	_, err := schemas.DecodeResult([]byte(`{"schema_version":2,"conversation":"c1"}`))
	var newer *schemas.ErrNewerSchema
	fmt.Println(errors.As(err, &newer), newer.Version)
	fmt.Println(err)
	// Output:
	// true 2
	// compaction value has schema_version 2; this reader understands 1: upgrade the reader
}

func ExampleEvidence_Validate() {
	ev := schemas.Evidence{ThroughSeq: 9, Items: []schemas.EvidenceItem{
		{Kind: schemas.EvidenceFile, Value: "src/lexer.go", Count: 3, LastSeq: 7, Changed: true},
		{Kind: schemas.EvidenceCommand, Value: "go test ./...", Count: 1, LastSeq: 9},
	}}
	fmt.Println(ev.Validate())
	ev.Items = append(ev.Items, schemas.EvidenceItem{Kind: "secret", Value: "x", Count: 1})
	fmt.Println(ev.Validate())
	// Output:
	// <nil>
	// evidence.items: item 2: unknown kind "secret"; must be file, command, url, id or number
}
