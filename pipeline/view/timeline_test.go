package view

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// rev is a revision written at second s holding a value of generation gen.
func rev(n uint64, s int, gen, tail, declinedAt uint64, id string) jetstream.Revision {
	v := &schemas.Result{SchemaVersion: 1, Conversation: "c", Generation: gen, TailStartSeq: tail, RequestID: id,
		DeclinedAtSeq: declinedAt, CreatedAt: at(s)}
	return jetstream.Revision{Revision: n, Time: at(s), Value: v}
}

func TestTimeline(t *testing.T) {
	tests := []struct {
		name string
		revs []jetstream.Revision
		evs  []schemas.Event
		want []string // kind/generation[/folded from-through][/duration][/error], newest first
	}{
		{
			name: "first compactions",
			revs: []jetstream.Revision{rev(1, 0, 1, 10, 0, "r1"), rev(2, 10, 2, 20, 0, "r2")},
			evs: []schemas.Event{
				{Type: schemas.EventRequested, RequestID: "r1", At: at(-1)},
				{Type: schemas.EventCompleted, RequestID: "r1", Generation: 1, DurationMS: 700, At: at(1)},
				{Type: schemas.EventCompleted, RequestID: "r2", Generation: 2, DurationMS: 900, Error: "fallback", At: at(11)},
			},
			want: []string{"compaction/2/10-19/900/fallback", "compaction/1/1-9/700"},
		},
		{
			name: "a decline marker before the first compaction",
			revs: []jetstream.Revision{rev(1, 0, 0, 1, 8, ""), rev(2, 10, 1, 12, 0, "r1")},
			evs: []schemas.Event{
				{Type: schemas.EventDeclined, RequestID: "rd", Generation: 0, DurationMS: 5, Error: "nothing to compact", At: at(0)},
			},
			want: []string{"compaction/1/1-11", "declined/0/5/nothing to compact"},
		},
		{
			name: "declines are matched by generation and time, not request id",
			revs: []jetstream.Revision{rev(1, 0, 3, 10, 0, "r3"), rev(2, 20, 3, 10, 15, "r3"), rev(3, 40, 3, 10, 30, "r3")},
			evs: []schemas.Event{
				{Type: schemas.EventDeclined, RequestID: "d0", Generation: 2, Error: "an older generation's", At: at(19)},
				{Type: schemas.EventDeclined, RequestID: "d1", Generation: 3, DurationMS: 11, Error: "first", At: at(20)},
				{Type: schemas.EventDeclined, RequestID: "d2", Generation: 3, DurationMS: 22, Error: "second", At: at(41)},
			},
			want: []string{"declined/3/22/second", "declined/3/11/first", "compaction/3/…-9", "gap/2"},
		},
		{
			name: "a decline whose compaction is gone",
			revs: []jetstream.Revision{rev(1, 0, 4, 10, 9, "r4")},
			want: []string{"declined/4", "gap/4"},
		},
		{
			name: "failures interleave by time",
			revs: []jetstream.Revision{rev(1, 0, 1, 10, 0, "r1"), rev(2, 30, 2, 20, 0, "r2")},
			evs: []schemas.Event{
				{Type: schemas.EventFailed, RequestID: "f1", Generation: 1, DurationMS: 3, Error: "llm down", At: at(15)},
				{Type: schemas.EventFailed, RequestID: "f2", Generation: 2, DurationMS: 4, Error: "llm down again", At: at(45)},
			},
			want: []string{"failed/2/4/llm down again", "compaction/2/10-19", "failed/1/3/llm down", "compaction/1/1-9"},
		},
		{
			name: "forgotten and started again",
			revs: []jetstream.Revision{rev(1, 0, 5, 50, 0, "r5"), rev(2, 10, 1, 70, 0, "n1")},
			want: []string{"compaction/1/1-69", "gap/1", "compaction/5/…-49", "gap/4"},
		},
		{
			name: "a delete marker and a broken value",
			revs: []jetstream.Revision{
				rev(1, 0, 1, 10, 0, "r1"),
				{Revision: 2, Time: at(10), Operation: "DEL"},
				{Revision: 3, Time: at(20), Err: errors.New("compaction value of c: newer schema")},
				rev(4, 30, 1, 15, 0, "n1"),
			},
			want: []string{"compaction/1/1-14", "invalid/0/compaction value of c: newer schema", "deleted/0", "compaction/1/1-9"},
		},
		{
			name: "no revision, only failures",
			evs: []schemas.Event{
				{Type: schemas.EventRequested, RequestID: "f1", At: at(0)},
				{Type: schemas.EventFailed, RequestID: "f1", DurationMS: 3, Error: "llm down", At: at(5)},
			},
			want: []string{"failed/0/3/llm down"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range timeline(tt.revs, tt.evs) {
				got = append(got, describe(e))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

func describe(e Entry) string {
	s := fmt.Sprintf("%s/%d", e.Kind, e.Generation)
	if e.Folded != nil {
		if e.Folded.From == 0 {
			s += fmt.Sprintf("/…-%d", e.Folded.Through)
		} else {
			s += fmt.Sprintf("/%d-%d", e.Folded.From, e.Folded.Through)
		}
	}
	if e.DurationMS != nil {
		s += fmt.Sprintf("/%d", *e.DurationMS)
	}
	if e.Error != "" {
		s += "/" + e.Error
	}
	return s
}

func TestCut(t *testing.T) {
	tests := []struct {
		give     string
		n        int
		want     string
		wantLeft int
	}{
		{"short", 10, "short", 0},
		{"exactly10!", 10, "exactly10!", 0},
		{"longer than ten", 10, "longer tha", 5},
		{"ééééé", 3, "ééé", 2},
		{"bad \xff byte", 100, "bad \uFFFD byte", 0},
	}
	for _, tt := range tests {
		got, left := cut(tt.give, tt.n)
		if got != tt.want || left != tt.wantLeft {
			t.Errorf("cut(%q, %d) = %q, %d; want %q, %d", tt.give, tt.n, got, left, tt.want, tt.wantLeft)
		}
	}
}

func TestGaugeZones(t *testing.T) {
	g := Gauge{ContextWindow: 1000, TargetTokens: 500, ThresholdTokens: 750, HardLimitTokens: 950}
	for n, want := range map[int]string{0: "under-target", 499: "under-target", 500: "over-target", 750: "over-threshold",
		949: "over-threshold", 950: "over-hard-limit", 5000: "over-hard-limit"} {
		g.Tokens = n
		if got := g.Zone(); got != want {
			t.Errorf("%d tokens: zone %s; want %s", n, got, want)
		}
	}
	if x := g.X(5000); x != 1000 {
		t.Errorf("X past the window %d; want 1000 (clamped)", x)
	}
	if x := g.X(750); x != 750 {
		t.Errorf("X(750) = %d", x)
	}
	if !strings.Contains(thousands("1234567"), "1,234,567") || thousands("-1000") != "-1,000" || thousands("12") != "12" {
		t.Errorf("thousands: %s %s", thousands("1234567"), thousands("-1000"))
	}
}
