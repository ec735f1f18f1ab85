// Package savings reads the savings ledger (schemas.LedgerEntry, the LEDGER stream the
// proxy writes) and says what Compactor saved, or cost: the tokens a model was sent with
// and without Compactor, their prompt-cache split, the cache writes compactions caused,
// the summarizer's own tokens, and the net in tokens and, with a price table, in
// dollars, grouped by tenant, conversation, model, client, day and mode.
//
// Every figure is defined once, on the field that holds it (Side, Row, Money), and in
// docs/savings.md.
//
// An Aggregator sums a ledger as it is read, entry by entry, into the reports of
// several groupings at once: a report holds the exchanges still waiting for their
// done entry and each conversation's points of change (MaxChangePoints), never the
// whole ledger. Aggregator.Read reads a store into it, the one function with Read that
// touches NATS; Aggregate sums entries already in memory (TenantData) through the same
// Aggregator.
package savings
