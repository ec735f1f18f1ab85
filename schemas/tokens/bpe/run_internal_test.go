package bpe

import (
	"strings"
	"testing"
)

func TestCountCutsLongRuns(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantCut bool
	}{
		{name: "letters up to MaxRun", give: "a " + strings.Repeat("b", MaxRun) + " c", wantCut: false},
		{name: "spaces up to MaxRun", give: "a" + strings.Repeat(" ", MaxRun) + "c", wantCut: false},
		{name: "digits are never cut", give: strings.Repeat("7", 20*MaxRun), wantCut: false},
		{name: "mixed classes are never cut", give: strings.Repeat(`{"a":"b"},`, 10*MaxRun), wantCut: false},
		{name: "long letters", give: strings.Repeat("ACGT", 2*MaxRun), wantCut: true},
		{name: "long spaces and newlines", give: strings.Repeat(" \r\n", 3*MaxRun), wantCut: true},
		{name: "long punctuation", give: strings.Repeat("=", 8*MaxRun), wantCut: true},
	}
	for _, enc := range Encodings() {
		c, err := New(enc)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(enc+"/"+tt.name, func(t *testing.T) {
				got, exact := c.Count(tt.give), c.count(tt.give)
				if !tt.wantCut {
					if got != exact {
						t.Fatalf("Count got %d; want the exact %d", got, exact)
					}
					return
				}
				// A cut moves the count by a token or two at most.
				cuts := len(tt.give) / MaxRun
				t.Logf("%d bytes, %d cuts: Count %d, exact %d", len(tt.give), cuts, got, exact)
				if d := got - exact; d < -2*cuts || d > 2*cuts {
					t.Fatalf("Count got %d; want within %d of the exact %d", got, 2*cuts, exact)
				}
			})
		}
	}
}
