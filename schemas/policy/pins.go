package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PinsKey is the conversation-policy key that pins messages after they were published:
// their CHAT sequences, comma-separated ("811,812"). Workers keep those messages
// verbatim (in pinned_seqs) from the next compaction on, as a message published with
// meta.pin = "true"; one already summarized comes back verbatim. Only a conversation's
// own policy may set it: the environment, profiles and tenants name no conversation's
// messages.
const PinsKey = "pins"

// MaxPins is how many sequences the pins key may list.
const MaxPins = 64

// ParsePins reads the value of the pins key: comma-separated positive integers (spaces
// around each allowed), at most MaxPins, no duplicates; "" is none. The sequences come
// back in the order written.
func ParsePins(v string) ([]uint64, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	fields := strings.Split(v, ",")
	if len(fields) > MaxPins {
		return nil, fmt.Errorf("%s: %d sequences; at most %d may be pinned", PinsKey, len(fields), MaxPins)
	}
	seqs := make([]uint64, 0, len(fields))
	for _, f := range fields {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil || n == 0 || f[0] == '0' {
			return nil, fmt.Errorf("%s: %q is not a positive integer (want sequences like \"811,812\")", PinsKey, f)
		}
		if slices.Contains(seqs, n) {
			return nil, fmt.Errorf("%s: sequence %d is listed twice", PinsKey, n)
		}
		seqs = append(seqs, n)
	}
	return seqs, nil
}

// FormatPins writes seqs as the value of the pins key, in the order given.
func FormatPins(seqs []uint64) string {
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = strconv.FormatUint(s, 10)
	}
	return strings.Join(parts, ",")
}

// PinnedSeqs are the sequences of the pins key (none when it is not set). Settings
// hold it checked: a value ParsePins refuses never resolves.
func (s Settings) PinnedSeqs() []uint64 {
	seqs, _ := ParsePins(s.Pins)
	return seqs
}
