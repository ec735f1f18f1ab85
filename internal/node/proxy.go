package node

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// newProxy is the proxy role (COMPACTOR_PROXY_LISTEN): its HTTP server, bound now, so
// a port in use stops start-up. It stores conversations through nc and st and
// resolves their settings with policies; it is measured and traced as the node is.
func newProxy(cfg Config, nc *nats.Conn, st *jetstream.Store, policies PolicySourcer) (*proxy.Server, error) {
	wires, convs := proxyRewriting(pipeline.NewWithStore(nc, st), policies, cfg.Logger)
	opts := proxy.Options{NATS: nc, Logger: cfg.Logger, Tracer: cfg.Telemetry.Traces}
	if m := cfg.Telemetry.Metrics; m != nil {
		opts.Observer = m.Proxy()
	}
	return proxy.New(*cfg.Proxy, wires, convs, opts)
}

// proxyRewriting is the one place the proxy's wires (the OpenAI and Anthropic APIs)
// and its Conversations (the store of CHAT) are built. Until the package has them, it
// gives no wire: every request passes through unchanged, marked not-rewritten-path,
// and the placeholder Conversations is never asked.
func proxyRewriting(_ *pipeline.Client, _ PolicySourcer, log zerolog.Logger) (map[string]proxy.Wire, proxy.Conversations) {
	log.Warn().Msg("proxy: this build rewrites no API yet; every request passes through unchanged")
	return nil, placeholderConversations{}
}

// placeholderConversations stands for the proxy's Conversations until the package has
// one: it stores nothing and refuses every turn.
type placeholderConversations struct{}

var errNoConversations = errors.New("proxy: no conversation store in this build")

func (placeholderConversations) Prepare(context.Context, string, []schemas.Message, proxy.TurnOptions) (*proxy.Turn, error) {
	return nil, errNoConversations
}

func (placeholderConversations) Finish(context.Context, *proxy.Turn, schemas.Message, *proxy.Usage) error {
	return errNoConversations
}
