// Package evidence extracts, carries forward and renders the evidence a summary tends
// to lose: files the agent read or changed, commands it ran, URLs, identifiers (issue
// and ticket ids, commit hashes, error codes) and numbers with units from user
// messages. Secrets in them are redacted (see [Redact]) before anything is cut or
// kept. A text is read once for the fixed strings the matches of every expression
// hold, and an expression runs only on the texts (or lines) that hold its own. It is pure and deterministic: plain functions over entries, no NATS, no
// LLM.
//
// [Extract] finds the items of some messages, [Merge] adds them to a previous
// [schemas.Evidence] within fixed bounds (dropping the least valuable), and [Render]
// writes the compact section readers append to the summary message, within a token
// budget: the same input always renders the same bytes, so prompt caches keep working.
package evidence
