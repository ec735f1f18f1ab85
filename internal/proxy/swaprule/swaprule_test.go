package swaprule_test

import (
	"testing"
	"time"

	"github.com/compactor/compactor/internal/proxy/swaprule"
	"github.com/compactor/compactor/schemas"
)

func TestWarm(t *testing.T) {
	for _, tt := range []struct {
		elapsed, ttl time.Duration
		want         bool
	}{
		{0, 5 * time.Minute, true},
		{5 * time.Minute, 5 * time.Minute, true},
		{5*time.Minute + 1, 5 * time.Minute, false},
		{0, 0, false}, // a TTL of 0: the provider caches nothing
		{0, -time.Second, false},
	} {
		if got := swaprule.Warm(tt.elapsed, tt.ttl); got != tt.want {
			t.Errorf("Warm(%s, %s) = %v, want %v", tt.elapsed, tt.ttl, got, tt.want)
		}
	}
}

func TestRereadAndKeep(t *testing.T) {
	g1, g2 := &schemas.Result{Generation: 1}, &schemas.Result{Generation: 2}
	for _, tt := range []struct {
		name          string
		tokens, stale int
		earlier       *schemas.Result
		gen           uint64
		want          bool
	}{
		{"under the bound: kept", 90, 100, g1, 1, false},
		{"over the bound, read with earlier: newest", 101, 100, g1, 1, true},
		{"over the bound, but the read fell back to a newer value", 101, 100, g1, 2, false},
		{"nothing earlier", 101, 100, nil, 2, false},
	} {
		if got := swaprule.Reread(tt.tokens, tt.stale, tt.earlier, tt.gen); got != tt.want {
			t.Errorf("%s: Reread = %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, tt := range []struct {
		name          string
		gen           uint64
		earlier, live *schemas.Result
		want          *schemas.Result
	}{
		{"generation 0", 0, g1, g1, nil},
		{"sent with earlier", 1, g1, g2, g1},
		{"sent with live", 2, g1, g2, g2},
		{"a newer one landed meanwhile", 3, g1, g2, nil},
		{"nothing read", 1, nil, nil, nil},
	} {
		if got := swaprule.Keep(tt.gen, tt.earlier, tt.live); got != tt.want {
			t.Errorf("%s: Keep = %v, want %v", tt.name, got, tt.want)
		}
	}
}
