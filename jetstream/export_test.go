package jetstream

import "context"

// SetForgetStepHook makes every forget call hook before each of its deletion steps,
// until the test ends.
func SetForgetStepHook(t interface{ Cleanup(func()) }, hook func(step string)) {
	forgetStepHook = hook
	t.Cleanup(func() { forgetStepHook = nil })
}

// LeaderTail is the read of a conversation from the stream leader one message a
// request (what LoadLeader did for the whole range before it read the range in
// batches), the reference of the tests.
func LeaderTail(ch *Chat, ctx context.Context, conv string, fromSeq, upToSeq uint64) ([]StoredMsg, error) {
	return ch.leaderTail(ctx, conv, fromSeq, upToSeq)
}
