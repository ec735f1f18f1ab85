package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// ByKey shows every key, each with the value set put there: a key added to Keys and
// set but forgotten in value shows as null and fails here.
func TestByKeyShowsEverySetting(t *testing.T) {
	var s Settings
	want := map[string]any{ProfileKey: "gold"}
	s.Profile = "gold"
	for i, k := range Keys {
		var text string
		switch k.Kind {
		case Int:
			text, want[k.Name] = fmt.Sprint(1000+i), 1000+i
		case Float:
			f := float64(i) / 100
			text, want[k.Name] = fmt.Sprint(f), f
		case Duration:
			d := time.Duration(i+1) * time.Second
			text, want[k.Name] = d.String(), d.String()
		case String:
			text, want[k.Name] = "v-"+k.Name, "v-"+k.Name
		}
		if k.Name == PinsKey {
			text, want[k.Name] = " 811, 812", "811,812"
		}
		if k.Name == "llm_base_url" {
			text, want[k.Name] = "https://user:secret@llm.example/v1?key=x", "https://llm.example/v1"
		}
		if err := s.set(k, text); err != nil {
			t.Fatalf("set %s: %v", k.Name, err)
		}
	}
	got := s.ByKey()
	if len(got) != len(want) {
		t.Errorf("ByKey has %d keys; want %d", len(got), len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %#v; want %#v", name, got[name], w)
		}
	}
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), "secret") {
		t.Fatalf("credentials shown: %s", b)
	}
}

func TestConversationKeys(t *testing.T) {
	keys := ConversationKeys()
	if keys[0] != ProfileKey || slices.Contains(keys, "llm_model") || !slices.Contains(keys, "threshold") {
		t.Fatalf("ConversationKeys() = %v", keys)
	}
	for _, k := range keys[1:] {
		if err := CheckConversation(Layer{k: "x"}); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// The summary cap is one function of the settings, bounded by the agent's window and by
// the summarizer's: a 1M-token agent model beside a small local summarizer gets a cap
// the summarizer can write and still read its input (issue 3).
func TestSummaryCapFitsBothWindows(t *testing.T) {
	tests := []struct {
		name string
		give Layer
		want int
	}{
		{"defaults", Layer{}, 2048},
		{"1M agent, default summarizer", Layer{"context_window": "1000000"}, 16000},
		{"1M agent, 5k summarizer", Layer{"context_window": "1000000", "summarizer_context_window": "5000"}, 625},
		{"small agent window caps at W/8", Layer{"context_window": "8000"}, 1000},
		{"explicit cap within both", Layer{"max_summary_tokens": "500", "summarizer_context_window": "5000"}, 500},
		{"explicit cap over the summarizer's share", Layer{"max_summary_tokens": "4000", "summarizer_context_window": "16000"}, 2000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewResolver(tc.give, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := r.Base()
			if got := s.Budget().SummaryCap(); got != tc.want {
				t.Fatalf("SummaryCap() = %d; want %d", got, tc.want)
			}
			if got, limit := s.Budget().SummaryCap(), s.SummarizerContextWindow/8; got > limit {
				t.Fatalf("SummaryCap() = %d; over 1/8 of summarizer_context_window %d", got, s.SummarizerContextWindow)
			}
		})
	}
}
