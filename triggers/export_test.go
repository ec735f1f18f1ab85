package triggers

// TokensOf returns the trigger's estimate for a conversation, and whether it tracks it.
func (b *Budget) TokensOf(conv string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.convs[conv]
	if !ok {
		return 0, false
	}
	return c.tokens, true
}
