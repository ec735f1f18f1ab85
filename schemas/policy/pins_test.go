package policy_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas/policy"
)

func TestParsePins(t *testing.T) {
	many := make([]string, policy.MaxPins+1)
	for i := range many {
		many[i] = fmt.Sprint(i + 1)
	}
	for _, tc := range []struct {
		name    string
		give    string
		want    []uint64
		wantErr string
	}{
		{name: "none", give: "", want: nil},
		{name: "blank", give: "  ", want: nil},
		{name: "one", give: "811", want: []uint64{811}},
		{name: "spaces", give: " 811 , 12", want: []uint64{811, 12}},
		{name: "the most", give: strings.Join(many[:policy.MaxPins], ","), want: nil},
		{name: "too many", give: strings.Join(many, ","), wantErr: "at most 64"},
		{name: "zero", give: "0", wantErr: `"0" is not a positive integer`},
		{name: "leading zero", give: "0811", wantErr: "not a positive integer"},
		{name: "negative", give: "-3", wantErr: "not a positive integer"},
		{name: "plus", give: "+3", wantErr: "not a positive integer"},
		{name: "word", give: "811,abc", wantErr: `"abc" is not a positive integer`},
		{name: "empty item", give: "811,,812", wantErr: `"" is not a positive integer`},
		{name: "trailing comma", give: "811,", wantErr: "not a positive integer"},
		{name: "duplicate", give: "811,812,811", wantErr: "811 is listed twice"},
		{name: "overflow", give: "99999999999999999999", wantErr: "not a positive integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := policy.ParsePins(tc.give)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParsePins(%q) = %v, %v; want an error with %q", tc.give, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePins(%q): %v", tc.give, err)
			}
			if tc.name == "the most" {
				if len(got) != policy.MaxPins {
					t.Fatalf("got %d sequences; want %d", len(got), policy.MaxPins)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ParsePins(%q) = %v; want %v", tc.give, got, tc.want)
			}
		})
	}
	if got := policy.FormatPins([]uint64{811, 12}); got != "811,12" {
		t.Fatalf("FormatPins = %q", got)
	}
}

// A conversation's policy sets pins and resolves to them; a bad value is a policy
// error naming the key; the environment and a profile may not set them (they name no
// conversation's messages).
func TestPinsOnlyInAConversationsPolicy(t *testing.T) {
	r, err := policy.NewResolver(nil, &policy.File{Profiles: map[string]map[string]any{"gold": {"threshold": 0.8}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Resolve(policy.Layer{policy.PinsKey: "811, 812", policy.ProfileKey: "gold"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.PinnedSeqs(), []uint64{811, 812}) || s.ByKey()[policy.PinsKey] != "811,812" {
		t.Fatalf("pinned %v, shown %v; want 811,812", s.PinnedSeqs(), s.ByKey()[policy.PinsKey])
	}
	if _, err := r.Resolve(policy.Layer{policy.PinsKey: "811,811"}); !errors.Is(err, policy.ErrPolicy) || !strings.Contains(err.Error(), "listed twice") {
		t.Fatalf("duplicate pins: %v; want a policy error", err)
	}
	if _, err := policy.NewResolver(policy.Layer{policy.PinsKey: "1"}, nil, nil); err == nil || !strings.Contains(err.Error(), "environment: pins") {
		t.Fatalf("pins in the environment: %v; want refused", err)
	}
	f := &policy.File{Profiles: map[string]map[string]any{"gold": {policy.PinsKey: "1"}}}
	if _, err := policy.NewResolver(nil, f, nil); err == nil || !strings.Contains(err.Error(), `profile "gold": pins`) {
		t.Fatalf("pins in a profile: %v; want refused", err)
	}
	if _, err := r.ForTenant("acme", map[string]any{policy.PinsKey: "1"}, nil); err == nil || !strings.Contains(err.Error(), "pins") {
		t.Fatalf("pins in a tenant's settings: %v; want refused", err)
	}
	data, err := policy.EncodeConversation(policy.Layer{policy.PinsKey: "811,812"})
	if err != nil {
		t.Fatal(err)
	}
	back, err := policy.DecodeConversation(data)
	if err != nil || back[policy.PinsKey] != "811,812" {
		t.Fatalf("round trip %s: %v, %v", data, back, err)
	}
}
