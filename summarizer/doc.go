// Package summarizer is the pool of workers that turns compaction requests into
// results. Any number of processes share the work queue; each fetches a request only
// when one of its workers is free. A job loads the conversation from the current tail
// start, splits it (package split), pre-trims tool outputs, has a Summarizer write the
// next summary from the previous one plus the newly covered messages, adds the evidence
// of those messages to the previous value's (package evidence) with its rendered section,
// guards against results that do not help, and compare-and-sets the new value on the
// revision it read.
//
// Summarizers live in subpackages: llm (any OpenAI-compatible endpoint through
// go-openai) and extractive (deterministic, no LLM; the fallback that keeps the hard
// limit when the LLM is down).
package summarizer
