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

// ConnOf is the connection c was made with.
func ConnOf(c *Client) *nats.Conn { return c.nc }
