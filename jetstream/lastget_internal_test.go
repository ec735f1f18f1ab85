package jetstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// A server that stops a batch short (its max bytes reached) says how many answers are
// pending: the subjects not answered yet are asked again, none is taken for absent.
func TestFirstSightAsksAgainWhenTheServerStopsShort(t *testing.T) {
	st := internalStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st.lastResults.maxBytes = 1 // one answer per request
	const n = 40
	for i := range n {
		conv := fmt.Sprintf("short-%d", i)
		r := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, Summary: conv, TailStartSeq: 1, FirstSeq: 1, CreatedAt: time.Now()}
		if _, err := st.Results().Put(ctx, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			conv := fmt.Sprintf("short-%d", i)
			_, v, _, err := st.Results().FirstSight(ctx, conv)
			switch {
			case err != nil:
				errs[i] = err
			case v == nil || v.Summary != conv:
				errs[i] = fmt.Errorf("got %+v; want the value of %s", v, conv)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("reader %d: %v", i, err)
		}
	}
}
