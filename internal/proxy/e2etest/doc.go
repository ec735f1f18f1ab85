// Package e2etest tests the proxy role end to end, as a user runs it: the real
// `compactor serve` binary with COMPACTOR_PROXY_LISTEN set, an in-process nats-server
// with JetStream, and internal/fakeupstream as both the agent's model provider and the
// summarizer's, driven by clients no one here wrote (the official openai and
// @anthropic-ai/sdk npm packages through the scripts in js/, and go-openai). The tests
// read what the upstream received and what CHAT stored. The package has no code of its
// own: everything is in its tests.
package e2etest
