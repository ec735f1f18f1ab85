// Package eval replays conversations (JSONL, one OpenAI chat message a line) through
// compaction and reports what it costs and what survives: `compactor eval` is its
// command; only cmd imports it.
//
// Run starts an embedded nats-server (or works in a namespace of its own on a named
// server) with the real trigger and summarizer pool, replays every conversation with
// every strategy in a conversation of its own (its policy set in the compaction-policy
// bucket), reads the context before every model turn as an agent would, and scores the
// final context against a ground truth read from the raw history (Extract): the paths
// the agent touched, the commands it ran, planted and listed facts, with and without
// the evidence section (WithoutEvidence), and by construction (ByConstruction: the
// summary's own text removed, what survives whatever the summarizer writes). Every context read is checked for broken tool pairs and
// missing pinned messages. With an LLM endpoint, a Prober asks the model probe
// questions given the final context and scores the answers (ScoreFiles, ScoreTerms).
//
// Every context read before a model turn is read as the proxy would forward it, by its
// cache-aware swap rule (swapRule), and tallied as a provider's prompt cache would see it
// (CacheTally: prefix identical, cache read and writes); Config.Rungs crosses the
// strategies with the values of the policy key rungs, and Config.Prices prices each arm
// with and without a cache (Cost). A probe file (ReadProbes) adds questions in four
// dimensions: recall, artifact, continuation, decision.
//
// The ground truth and the scores are plain functions over []schemas.Message, tested
// without a server.
package eval
