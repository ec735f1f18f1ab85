package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/compactor/compactor/jetstream"
)

// DurabilityReport is what syncing every write costs ingest: the pipeline client's
// publishing (PublishBatch, every ack in) on a server that flushes every write before
// acknowledging it (sync_interval: always, the shipped setting) ÷ the same on one that
// flushes every 2 minutes (nats-server's default), two fresh servers of the run's kind
// side by side, rounds alternating.
type DurabilityReport struct {
	Messages int `json:"messages"`
	// SyncMsgsPerSec and IntervalMsgsPerSec are the medians of durabilityRounds rounds.
	SyncMsgsPerSec     float64 `json:"sync_msgs_per_sec"`
	IntervalMsgsPerSec float64 `json:"interval_msgs_per_sec"`
	// Ratio is SyncMsgsPerSec ÷ IntervalMsgsPerSec.
	Ratio float64 `json:"ratio"`
	// Note says why it was not measured ("" when it was).
	Note string `json:"note,omitempty"`
}

// durabilityRounds is how many rounds each server publishes, alternating.
const durabilityRounds = 3

func measureDurability(ctx context.Context, srv *server, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
	dr := &rep.Durability
	if srv.Kind == "external" {
		dr.Note = "not measured against --nats-url: its sync setting is its own"
		progress("durability: %s", dr.Note)
		return nil
	}
	load := c.interleaved(sz.durabilityMessages, sz.ingestConversations)
	dr.Messages = len(load)
	synced, err := startLike(srv, syncAlways)
	if err != nil {
		return fmt.Errorf("server syncing every write: %w", err)
	}
	defer synced.stop()
	lazy, err := startLike(srv, syncDefault)
	if err != nil {
		return fmt.Errorf("server flushing every 2 minutes: %w", err)
	}
	defer lazy.stop()
	// The settings the two were started with are the ones they run with.
	for _, s := range []struct {
		srv  *server
		want bool
	}{{synced, true}, {lazy, false}} {
		if s.srv.monitor == "" {
			continue // embedded: set directly
		}
		d := jetstream.ReadDurability(ctx, nil, []string{s.srv.monitor})
		if !d.Known() || d.SyncsEveryWrite() != s.want {
			return fmt.Errorf("a server started to sync every write=%v reports: %s", s.want, d)
		}
	}
	progress("durability: %d messages through the client, %d rounds on each server, alternating", len(load), durabilityRounds)
	var syncs, lazies []time.Duration
	for range durabilityRounds {
		d, err := clientPublishOnly(ctx, synced.URL, load, &cpuMeter{server: noCPU})
		if err != nil {
			return fmt.Errorf("syncing every write: %w", err)
		}
		syncs = append(syncs, d)
		if d, err = clientPublishOnly(ctx, lazy.URL, load, &cpuMeter{server: noCPU}); err != nil {
			return fmt.Errorf("flushing every 2 minutes: %w", err)
		}
		lazies = append(lazies, d)
	}
	n := float64(len(load))
	dr.SyncMsgsPerSec, dr.IntervalMsgsPerSec = n/pct(syncs, 50).Seconds(), n/pct(lazies, 50).Seconds()
	dr.Ratio = dr.SyncMsgsPerSec / dr.IntervalMsgsPerSec
	progress("durability: syncing every write %.0f msgs/s, flushing every 2 minutes %.0f msgs/s: %.2f", dr.SyncMsgsPerSec, dr.IntervalMsgsPerSec, dr.Ratio)
	return nil
}
