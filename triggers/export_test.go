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
