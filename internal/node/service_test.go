package node_test

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/pipeline/service"
)

// COMPACTOR_API_CONCURRENCY reaches the compactor service: each of its endpoints serves
// that many requests at once; without it, the service's default.
func TestAPIConcurrencyReachesTheService(t *testing.T) {
	for given, want := range map[int]int{0: service.DefaultConfig().MaxConcurrentRequests, 3: 3, 64: 64} {
		cfg, err := node.Settings{Roles: "api", APIConcurrency: given}.Config(zerolog.Nop(), telemetry.Telemetry{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Service == nil || cfg.Service.MaxConcurrentRequests != want {
			t.Errorf("APIConcurrency %d: service config %+v; want %d requests at once", given, cfg.Service, want)
		}
	}
}
