package schemas

import "embed"

// Files holds the JSON Schema (draft 2020-12) of every v1 payload: message.v1.json,
// request.v1.json, result.v1.json, event.v1.json, dead-letter.v1.json, policy.v1.json,
// and the compactor service's requests and answers (service-*.v1.json). Their
// property names are tested against the Go types, so the two cannot drift.
//
//go:embed *.v1.json
var Files embed.FS
