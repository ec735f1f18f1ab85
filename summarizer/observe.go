package summarizer

import (
	"time"

	"github.com/compactor/compactor/schemas"
)

// Outcome is how one delivery of a request ended, as a JobReport tells it.
type Outcome string

// The outcomes of a delivery. The set is closed: an observer may use them as metric
// label values.
const (
	// OutcomeCompleted: a new value was written (an LLM summary or the fallback one).
	OutcomeCompleted Outcome = "completed"
	// OutcomeAlreadyDone: the value already held this request (done before a crash),
	// or a repair request found nothing left to repair; only acked.
	OutcomeAlreadyDone Outcome = "already_done"
	// OutcomeStale: the delivery was held past its ack wait and its request was done
	// by another worker, or replaced, meanwhile; nothing was written.
	OutcomeStale Outcome = "stale"
	// OutcomeDeclined: the guard refused the result (too little progress, a summary
	// over its cap, nothing to compact).
	OutcomeDeclined Outcome = "declined"
	// OutcomeRetried: the attempt failed and the request was handed back with a delay.
	OutcomeRetried Outcome = "retried"
	// OutcomeFailed: the last attempt, or a permanent failure: dead-lettered.
	OutcomeFailed Outcome = "failed"
	// OutcomeInvalid: the request did not decode or validate: dead-lettered unread.
	OutcomeInvalid Outcome = "invalid"
	// OutcomeForgotten: the conversation was forgotten before or while the job ran.
	OutcomeForgotten Outcome = "forgotten"
	// OutcomeAborted: stopped at the drain timeout and handed back to the queue.
	OutcomeAborted Outcome = "aborted"
)

// Outcomes lists every Outcome.
var Outcomes = []Outcome{OutcomeCompleted, OutcomeAlreadyDone, OutcomeDeclined, OutcomeRetried,
	OutcomeFailed, OutcomeInvalid, OutcomeForgotten, OutcomeAborted}

// TriggerUnknown is JobReport.Trigger when the request did not say (an invalid one).
const TriggerUnknown = "unknown"

// JobReport is what the pool tells its Observer about one delivery of a request. It
// holds no conversation id: what an observer does with it (metric labels) stays
// bounded.
type JobReport struct {
	// Trigger is the request's trigger kind (schemas.TriggerBudget, …), TriggerUnknown
	// for a request that did not decode or validate.
	Trigger string
	Outcome Outcome
	// Attempt is the delivery's number (1 for the first).
	Attempt uint64
	// Duration is from the delivery's arrival to its outcome.
	Duration time.Duration
	// TokensBefore and TokensAfter are the context's size before and after a completed
	// compaction (0 otherwise).
	TokensBefore, TokensAfter int
	// Fallback is true when a completed compaction wrote the deterministic fallback
	// summary because the summarizer failed.
	Fallback bool
	// Repair is what became of the repair of a fallback the delivery tried ("" when it
	// tried none).
	Repair RepairOutcome
	// RetryIn is how long the request is handed back for after a failed attempt
	// (OutcomeRetried): the backoff, or what the endpoint asked for.
	RetryIn time.Duration
}

// RepairOutcome is what became of the repair of a value built on a fallback.
type RepairOutcome string

// The outcomes of a repair. The set is closed: an observer may use them as metric label
// values.
const (
	// RepairRepaired: the LLM summarized the raw messages and the repaired value was
	// written.
	RepairRepaired RepairOutcome = "repaired"
	// RepairFailed: the LLM failed (or its repair was declined); the fallback stays and
	// the repair is tried again later.
	RepairFailed RepairOutcome = "failed"
	// RepairGap: messages the fallback covers left CHAT; the fallback stays for good.
	RepairGap RepairOutcome = "gap"
)

// RepairOutcomes lists every RepairOutcome.
var RepairOutcomes = []RepairOutcome{RepairRepaired, RepairFailed, RepairGap}

// Observer hears the outcome of every delivery the pool handles, for metrics. It is
// called from the workers' goroutines, after the request was settled, and must not
// block.
type Observer interface {
	JobDone(JobReport)
}

// knownTrigger is the trigger kind of a request for a report: one of the contract's,
// TriggerUnknown otherwise (so hostile input never makes a new label value).
func knownTrigger(kind string) string {
	switch kind {
	case schemas.TriggerBudget, schemas.TriggerStructural, schemas.TriggerTemporal, schemas.TriggerManual:
		return kind
	}
	return TriggerUnknown
}

// Busy is how many requests this pool is working on now.
func (p *Pool) Busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inFlight)
}

// Workers is how many requests the pool works on at most at once.
func (p *Pool) Workers() int { return p.cfg.Workers }
