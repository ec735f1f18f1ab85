package triggers

// TokensOf returns the trigger's estimate for a conversation, and whether it tracks it.
func (t *Trigger) TokensOf(conv string) (int, bool) {
	tr := t.lookup(conv)
	if tr == nil {
		return 0, false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.st == nil {
		return 0, false
	}
	return tr.st.tokens, true
}

// SignalPending reports whether a policy change or a new value was signalled for a
// conversation and not yet taken by one of its handlers.
func (t *Trigger) SignalPending(conv string) bool {
	tr := t.lookup(conv)
	if tr == nil {
		return false
	}
	tr.sigMu.Lock()
	defer tr.sigMu.Unlock()
	return tr.sig.stale
}

// RetryScheduled reports whether a re-evaluation of the conversation is scheduled: a
// timer that will ask for a compaction again.
func (t *Trigger) RetryScheduled(conv string) bool {
	tr := t.lookup(conv)
	if tr == nil {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.st != nil && tr.st.retry != nil
}

// DropStates forgets every conversation the trigger tracks (a heap benchmark measures
// what that frees).
func (t *Trigger) DropStates() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.convs)
	t.convs = map[string]*tracked{}
}

// TokensOf returns the estimate of the partition trigger that tracks conv, if any.
func (ps *Partitions) TokensOf(conv string) (int, bool) {
	ps.mu.Lock()
	var ts []*Trigger
	for _, r := range ps.running {
		ts = append(ts, r.t)
	}
	ps.mu.Unlock()
	for _, t := range ts {
		if n, ok := t.TokensOf(conv); ok {
			return n, true
		}
	}
	return 0, false
}
