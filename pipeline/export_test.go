package pipeline

import "testing"

// SetBeforeStubHook runs fn between storing an offloaded message's object and
// publishing its stub, for the rest of t.
func SetBeforeStubHook(t *testing.T, fn func()) {
	beforeStubHook = fn
	t.Cleanup(func() { beforeStubHook = nil })
}
