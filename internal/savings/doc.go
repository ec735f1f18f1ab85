// Package savings reads the savings ledger (schemas.LedgerEntry, the LEDGER stream the
// proxy writes) and says what Compactor saved, or cost: the tokens a model was sent with
// and without Compactor, their prompt-cache split, the cache writes compactions caused,
// the summarizer's own tokens, and the net in tokens and, with a price table, in
// dollars, grouped by tenant, conversation, model, client, day and mode.
//
// Every figure is defined once, on the field that holds it (Side, Row, Money), and in
// docs/savings.md. Aggregate is pure; Read is the one function that touches NATS.
package savings
