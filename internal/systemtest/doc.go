// Package systemtest holds Compactor's system tests: the whole pipeline end to end on
// in-process NATS servers (stacks built with node.New from a node.Config, against a
// fake OpenAI-compatible endpoint), real processes of the built compactor and
// nats-server binaries (clusters, partitions, crashes, soaks), the roles of
// deploy/nats/accounts.conf, and the TypeScript client, the Node.js example and the web
// view in headless Chromium. The package has no code but its tests.
//
// They take minutes. `go test ./...` runs them with everything else; the unit tests
// alone run with
//
//	go test $(go list ./... | grep -v /internal/systemtest)
//
// Tests that need the transcript corpus (AGENT_CORPUS_DIR), npm packages or a binary
// skip without them, and fail instead with CI=true.
package systemtest
