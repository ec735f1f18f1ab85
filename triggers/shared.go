package triggers

import (
	"runtime"
	"sync"
	"weak"

	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// shared is what conversations with the same resolved policy have in common: the
// settings, their budget and the tokenizer's counter. It is never changed once made;
// a policy change gives a conversation another one.
type shared struct {
	settings policy.Settings
	budget   budget.Budget
	count    tokens.Counter
}

// sharedPolicies hands out one *shared per distinct resolved policy, so a tracked
// conversation holds a pointer instead of a copy of its settings (over 300 bytes, most
// of a conversation's state). Conversations on the defaults or one profile share one
// value. A value no conversation holds any more is forgotten with its last holder: the
// table keeps weak pointers, and the value's cleanup removes its entry.
type sharedPolicies struct {
	mu sync.Mutex
	m  map[policy.Settings]weak.Pointer[shared]
}

// get returns the shared value of s, made with count when there is none.
func (sp *sharedPolicies) get(s policy.Settings, count tokens.Counter) *shared {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if p := sp.m[s].Value(); p != nil {
		return p
	}
	if sp.m == nil {
		sp.m = map[policy.Settings]weak.Pointer[shared]{}
	}
	p := &shared{settings: s, budget: s.Budget(), count: count}
	wp := weak.Make(p)
	sp.m[s] = wp
	runtime.AddCleanup(p, func(s policy.Settings) {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		if sp.m[s] == wp {
			delete(sp.m, s)
		}
	}, s)
	return p
}

// size is how many distinct policies the table holds.
func (sp *sharedPolicies) size() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.m)
}
