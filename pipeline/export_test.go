package pipeline

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// SetBeforeStubHook runs fn between storing an offloaded message's object and
// publishing its stub, for the rest of t.
func SetBeforeStubHook(t *testing.T, fn func()) {
	beforeStubHook = fn
	t.Cleanup(func() { beforeStubHook = nil })
}

// SetAfterStubHook runs fn between publishing an offloaded message's stub and keeping
// its object, for the rest of t.
func SetAfterStubHook(t *testing.T, fn func()) {
	afterStubHook = fn
	t.Cleanup(func() { afterStubHook = nil })
}

// ConnOf is the connection c was made with.
func ConnOf(c *Client) *nats.Conn { return c.nc }
