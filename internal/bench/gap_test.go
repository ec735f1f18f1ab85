package bench

import (
	"strings"
	"testing"
)

// The ingest gap says the trigger is not the limit only when its drain alone was at
// least as fast as the raw baseline (a review found the claim printed whatever the
// figures).
func TestIngestGapSaysWhatTheDrainMeasured(t *testing.T) {
	for _, c := range []struct {
		drain float64
		want  string
	}{{20000, "slower than raw publish"}, {120000, "or faster"}} {
		r := &Report{CPUs: 2}
		r.IngestRatio = 0.3
		r.Ingest.RawMsgsPerSec = 100000
		r.Ingest.Rows = []IngestRow{{TriggerDrainMsgsPerSec: c.drain, TriggerDrainCores: 1.5}}
		g, ok := r.ingestGap()
		if !ok {
			t.Fatal("an ingest ratio of 0.3 has no gap")
		}
		if !strings.Contains(g.Cause, c.want) {
			t.Errorf("drain %.0f msgs/s against raw 100,000: the gap does not say %q:\n%s", c.drain, c.want, g.Cause)
		}
	}
}
