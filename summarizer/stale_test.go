package summarizer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// heldSummarizer is the extractive summarizer, held at its call until released: the
// LLM call of a worker that froze in it.
type heldSummarizer struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldSummarizer) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	h.once.Do(func() { close(h.entered) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return summarizer.Output{}, ctx.Err()
	}
	out, err := extractive.New().Summarize(ctx, in)
	out.Fallback = false // as an LLM's summary
	return out, err
}

// outcomes keeps the outcome of every delivery a pool handled.
type outcomes struct {
	mu  sync.Mutex
	got []summarizer.Outcome
}

func (o *outcomes) JobDone(r summarizer.JobReport) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, r.Outcome)
}

func (o *outcomes) all() []summarizer.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]summarizer.Outcome(nil), o.got...)
}

// Item 8a (a chaos run's finding): a worker frozen past its ack wait (a SIGSTOP) woke
// and ran its stale delivery. Its request had been completed by another worker
// meanwhile, and a later request had written the next generation: the stale delivery
// compacted again on it (a generation nobody asked for, under the threshold) or wrote a
// decline marker on it. A delivery whose request another worker did (the value holds
// it, or a later request's value) writes nothing: not a value, not a marker, not an
// event.
func TestStaleDeliveryWritesNothing(t *testing.T) {
	for _, frozen := range []string{"after it took the request", "in its LLM call"} {
		t.Run(frozen, func(t *testing.T) {
			srv := jstest.Server(t)
			nc := jstest.Conn(t, srv)
			cfg := jetstream.DefaultConfig()
			cfg.WorkerAckWait = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := jetstream.Provision(ctx, nc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			last := seed(t, ctx, st, "stale", 8)
			r1 := request(t, ctx, st, "stale", last)

			// The worker that freezes: it took r1, and sends no heartbeat from now on.
			q, err := st.Queue().Requests(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d, err := q.Next(ctx, 5*time.Second)
			if err != nil || d == nil {
				t.Fatalf("the frozen worker took nothing: %v", err)
			}
			held := &heldSummarizer{entered: make(chan struct{}), release: make(chan struct{})}
			fcfg := summarizer.DefaultConfig()
			fcfg.InProgressEvery = time.Hour // frozen: no heartbeat
			frozenObs := &outcomes{}
			frozenPool, err := summarizer.NewPool(fcfg, st, summarizer.Options{Policies: window4000{}, Fallback: extractive.New(),
				Observer: frozenObs, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
				Summarizers: func(policy.Settings) (summarizer.Summarizer, error) {
					if frozen == "in its LLM call" {
						return held, nil
					}
					return extractive.New(), nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			woke := make(chan struct{})
			wake := func() {
				go func() {
					defer close(woke)
					frozenPool.Handle(ctx, d)
				}()
			}
			if frozen == "in its LLM call" {
				wake()
				select {
				case <-held.entered:
				case <-ctx.Done():
					t.Fatal("the frozen worker never called its summarizer")
				}
			}

			// Another worker gets r1 once the ack wait is past, and completes it.
			pcfg := summarizer.DefaultConfig()
			pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
			runPool(t, st, pcfg, summarizer.Options{Policies: window4000{},
				Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
			if ev, err := st.Events().WaitOutcome(ctx, "stale", r1.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
				t.Fatalf("r1 by the other worker: %+v, %v", ev, err)
			}
			if frozen == "after it took the request" {
				// A later request writes the next generation.
				last = seed(t, ctx, st, "stale", 8)
				r2 := request(t, ctx, st, "stale", last)
				if ev, err := st.Events().WaitOutcome(ctx, "stale", r2.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
					t.Fatalf("r2: %+v, %v", ev, err)
				}
			}
			before, rev, err := st.Results().Get(ctx, "stale", true)
			if err != nil || before == nil {
				t.Fatal(before, err)
			}
			since := time.Now()

			// The frozen worker wakes.
			if frozen == "in its LLM call" {
				close(held.release)
			} else {
				wake()
			}
			select {
			case <-woke:
			case <-ctx.Done():
				t.Fatal("the woken worker never settled its delivery")
			}
			after, afterRev, err := st.Results().Get(ctx, "stale", true)
			if err != nil {
				t.Fatal(err)
			}
			if afterRev != rev {
				t.Fatalf("the stale delivery of r1 wrote generation %d (revision %d) over generation %d (revision %d)",
					after.Generation, afterRev, before.Generation, rev)
			}
			if got := frozenObs.all(); len(got) != 1 || got[0] != summarizer.OutcomeStale {
				t.Fatalf("the woken worker's outcome %v; want stale", got)
			}
			// No event of r1 after it woke (an event of r1 is published before the
			// pool's report, which Handle's return follows).
			evCtx, stop := context.WithTimeout(ctx, 200*time.Millisecond)
			defer stop()
			if ev, err := st.Events().WaitOutcome(evCtx, "stale", r1.RequestID, since); err == nil {
				t.Fatalf("the stale delivery published %+v", ev)
			}
		})
	}
}
