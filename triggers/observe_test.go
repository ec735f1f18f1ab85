package triggers_test

import (
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/triggers"
)

// observed records what a trigger tells its Observer.
type observed struct {
	mu        sync.Mutex
	ages      []time.Duration
	requested map[string]int // kind/result
}

func (o *observed) Counted(age time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ages = append(o.ages, age)
}

func (o *observed) Requested(kind string, r triggers.RequestResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requested[kind+"/"+string(r)]++
}

// The trigger tells its Observer the age of every chat message it counts, and each
// request it makes with the queue's answer.
func TestObserverHearsCountsAndRequests(t *testing.T) {
	nc, st := setup(t)
	obs := &observed{requested: map[string]int{}}
	cfg := testConfig()
	cfg.Observer = obs
	r := startWith(t, st, cfg)
	var last uint64
	before := time.Now()
	for range 8 { // 3,200 tokens: over the threshold of 3,000
		last = publish(t, st, "observed", text(1600))
	}
	handled(t, nc, st, last)
	r.stop()
	took := time.Since(before)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.ages) != 8 {
		t.Errorf("%d messages counted; want 8", len(obs.ages))
	}
	for _, a := range obs.ages {
		if a < 0 || a > took {
			t.Errorf("a message counted at age %s; want between 0 and %s", a, took)
		}
	}
	if n := obs.requested[schemas.TriggerBudget+"/"+string(triggers.RequestQueued)]; n != 1 || len(obs.requested) != 1 {
		t.Errorf("requests observed: %v; want one budget request queued", obs.requested)
	}
}
