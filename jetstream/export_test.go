package jetstream

// SetForgetStepHook makes every forget call hook before each of its deletion steps,
// until the test ends.
func SetForgetStepHook(t interface{ Cleanup(func()) }, hook func(step string)) {
	forgetStepHook = hook
	t.Cleanup(func() { forgetStepHook = nil })
}
