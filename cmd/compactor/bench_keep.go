package main

import (
	"bytes"
	"regexp"
)

// handKept matches a section of the benchmarks document kept by hand, not generated:
// from "<!-- hand-kept: NAME -->" through "<!-- /hand-kept: NAME -->" and the line end.
var handKept = regexp.MustCompile(`(?s)<!-- hand-kept: ([a-z0-9-]+) -->\n.*?<!-- /hand-kept: ([a-z0-9-]+) -->\n`)

// handKeptBefore is where a regeneration puts the hand-kept sections: before this
// heading of the generated document, else at its end.
const handKeptBefore = "\n## Past one machine\n"

// keepHandSections is gen, the generated benchmarks document, with the hand-kept
// sections of old (the document it replaces) copied in, in their order, so that
// `compactor bench --doc` keeps them (docs/benchmarks.md's rungs table is one, measured by
// `compactor eval`). A section whose end marker names another section is not one.
func keepHandSections(old, gen []byte) []byte {
	var kept []byte
	for _, m := range handKept.FindAllSubmatchIndex(old, -1) {
		if bytes.Equal(old[m[2]:m[3]], old[m[4]:m[5]]) {
			kept = append(append(kept, old[m[0]:m[1]]...), '\n')
		}
	}
	if len(kept) == 0 {
		return gen
	}
	at := bytes.Index(gen, []byte(handKeptBefore))
	if at < 0 {
		return append(append(append([]byte{}, gen...), '\n'), kept...)
	}
	at++ // after the blank line's newline
	return bytes.Join([][]byte{gen[:at], kept, gen[at:]}, nil)
}
