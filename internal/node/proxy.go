package node

import (
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wires"
	"github.com/compactor/compactor/jetstream"
)

// newProxy is the proxy role (COMPACTOR_PROXY_LISTEN): its HTTP server, bound now, so
// a port in use stops start-up. It stores conversations through nc and st and
// resolves their settings with policies; it is measured and traced as the node is.
func newProxy(cfg Config, nc *nats.Conn, st *jetstream.Store, policies PolicySourcer) (*proxy.Server, error) {
	convs := proxy.NewConversations(nc, st, policies.Settings, cfg.Logger)
	opts := proxy.Options{NATS: nc, Logger: cfg.Logger, Tracer: cfg.Telemetry.Traces}
	if m := cfg.Telemetry.Metrics; m != nil {
		opts.Observer = m.Proxy()
	}
	if l := st.Ledger(); l.Enabled() {
		// Booked from the moment the stream exists: an admin may provision it later.
		opts.Ledger = l
		if slices.Contains(st.MissingBuckets(), st.Config().LedgerStream) {
			cfg.Logger.Warn().Str("stream", st.Config().LedgerStream).
				Msg("proxy: the savings ledger stream is missing and this user may not create it: exchanges are not booked until an admin provisions (compactor provision, or serve as admin)")
		}
	}
	return proxy.New(*cfg.Proxy, proxyWires(), convs, opts)
}

// proxyWires are the APIs whose conversation the proxy rewrites.
func proxyWires() map[string]proxy.Wire {
	return wires.All()
}
