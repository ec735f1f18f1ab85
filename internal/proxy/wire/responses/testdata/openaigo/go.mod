// A module of its own, so that the project's go.mod does not take openai-go: it checks
// the responses wire against the OpenAI Go SDK's types (run it from this folder:
// go test ./...). Its path lies under the project's, so it may import the wire.
module github.com/compactor/compactor/internal/proxy/wire/responses/testdata/openaigo

go 1.26.0

replace github.com/compactor/compactor => ../../../../../..

require (
	github.com/compactor/compactor v0.0.0-00010101000000-000000000000
	github.com/openai/openai-go/v3 v3.105.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/tidwall/gjson v1.20.1 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
)
