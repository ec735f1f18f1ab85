package evidence

import (
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// ArgumentEvidence is what tool calls state directly, for tests to check extraction
// against: the normalized path arguments of every tool call and the compact commands of
// shell tools, their secrets redacted.
func ArgumentEvidence(entries []schemas.Entry) (paths, commands []string) {
	for _, e := range entries {
		for _, tc := range e.Message.ToolCalls {
			var obj map[string]any
			if json.Unmarshal([]byte(tc.Function.Arguments), &obj) != nil {
				continue
			}
			lname := strings.ToLower(tc.Function.Name)
			for k, v := range obj {
				s, ok := v.(string)
				if !ok {
					continue
				}
				if pathKeys[strings.ToLower(k)] {
					// Cleaned with the standard library alone, not with the code under test.
					if p := path.Clean(strings.TrimSpace(s)); p != "." && p != "/" && s != "" {
						paths = append(paths, p)
					}
				}
				if commandKeys[strings.ToLower(k)] && shellTool(lname) && strings.TrimSpace(s) != "" {
					commands = append(commands, Compact(Redact(s))) // secrets are expected redacted
				}
			}
		}
	}
	return paths, commands
}

// SortByRank sorts items most valuable first.
func SortByRank(items []schemas.EvidenceItem) { slices.SortFunc(items, Rank) }
