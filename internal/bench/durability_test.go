package bench

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The durability measurement publishes on a server that syncs every write and on one
// that flushes every 2 minutes, each checked to run with the setting it was started
// with, and reports both rates and their ratio; its row and its paragraph are in the
// table and the doc. (How much syncing costs is the disk's, so no bound is asserted.)
func TestDurabilityMeasurement(t *testing.T) {
	c, err := LoadCorpus(filepath.Join("..", "..", "examples", "transcripts"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "examples", "transcripts")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	sz := tiny
	rep, err := Run(ctx, Config{Corpus: dir, sizes: &sz, Progress: &progress, Only: []string{"durability"}})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	dr := rep.Durability
	if dr.Messages != sz.durabilityMessages || dr.Note != "" {
		t.Fatalf("durability: %+v; want %d messages measured", dr, sz.durabilityMessages)
	}
	for name, v := range map[string]float64{"sync": dr.SyncMsgsPerSec, "interval": dr.IntervalMsgsPerSec, "ratio": dr.Ratio, "headline": rep.SyncIngestRatio} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v; want a positive finite number", name, v)
		}
	}
	var table, doc bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "9. the client's publishing") || !strings.Contains(doc.String(), "9. **Durability.** 300 corpus messages") {
		t.Errorf("the table or the doc lacks the durability measurement:\n%s", table.String())
	}
	// Against --nats-url it is not measured, and says why.
	ext := &Report{}
	if err := measureDurability(ctx, &server{Kind: "external"}, c, sz, ext, func(string, ...any) {}); err != nil || ext.Durability.Note == "" || ext.Durability.Ratio != 0 {
		t.Errorf("external server: %v, %+v", err, ext.Durability)
	}
}
