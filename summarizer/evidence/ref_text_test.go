// Code copied from text.go as it was before the one-pass scanner, every
// package-level name prefixed with ref: the trusted reference the differential tests
// and fuzz targets compare the fast paths with. Do not edit but to fix it.

package evidence

import (
	"regexp"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// maxPerMessage bounds the matches of one pattern taken from one message.
const refMaxPerMessage = 200

// maxURLBytes is the longest URL kept: longer ones are mostly signed or data-laden.
const refMaxURLBytes = 300

// urlRE is an http or https URL; trailing punctuation is trimmed after matching. A
// redacted part (Redacted) is part of the URL.
var refUrlRE = regexp.MustCompile(`https?://(?:[^\s<>"'` + "`" + `\\^{}|\[\]]|` + regexp.QuoteMeta(refRedacted) + `)+`)

// urls records the http(s) URLs of text.
func (c *refCollector) urls(text string, seq uint64) {
	if !strings.Contains(text, "://") {
		return
	}
	for _, u := range refUrlRE.FindAllString(text, refMaxPerMessage) {
		u = refTrimURL(u)
		if len(u) > len("https://x") && len(u) <= refMaxURLBytes {
			c.add(schemas.EvidenceURL, u, seq, false)
		}
	}
}

// trimURL drops punctuation that ends the sentence around a URL, and a closing
// bracket or parenthesis it does not open.
func refTrimURL(u string) string {
	for {
		n := len(u)
		u = strings.TrimRight(u, ".,;:!?*")
		for _, pair := range [][2]string{{"(", ")"}, {"[", "]"}} {
			if strings.HasSuffix(u, pair[1]) && strings.Count(u, pair[0]) < strings.Count(u, pair[1]) {
				u = u[:len(u)-1]
			}
		}
		if len(u) == n {
			return u
		}
	}
}

// Identifier patterns. They are conservative: a false identifier costs budget, and a
// reader cannot tell it from a real one.
var (
	// ticketRE: ABC-123, PROJ-4521, ORA-00942 (a letter first, 2–10 characters).
	refTicketRE = regexp.MustCompile(`(?:^|[^\w-])([A-Z][A-Z0-9]{1,9}-[0-9]{1,7})(?:$|[^\w-])`)
	// cveRE: CVE-2024-12345.
	refCveRE = regexp.MustCompile(`\bCVE-[0-9]{4}-[0-9]{4,7}\b`)
	// issueRE: #123 after a blank, a bracket or the start, not in the middle of a word.
	refIssueRE = regexp.MustCompile(`(?:^|[\s(\[])#([0-9]{1,7})\b`)
	// commitRE: a hash named as a commit, or a full 40-character hash.
	refCommitRE     = regexp.MustCompile(`(?i)\b(?:commit|sha|revision)\s*:?\s*([0-9a-f]{7,40})\b`)
	refFullCommitRE = regexp.MustCompile(`\b[0-9a-f]{40}\b`)
	// httpRE: HTTP 503, HTTP/1.1 404, status code 500 (client and server errors only).
	refHttpRE = regexp.MustCompile(`(?i)\b(?:HTTP(?:/[0-9](?:\.[0-9])?)?|status(?:\s+code)?)[\s:]+([45][0-9]{2})\b`)
	// lintRE: compiler and linter codes such as E1101, W0611, F401, TS2304, CS0246.
	refLintRE = regexp.MustCompile(`\b(?:[EWF][0-9]{3,5}|TS[0-9]{4}|CS[0-9]{4})\b`)
)

// notTickets are prefixes of ABC-123 shaped words that are names, not ids.
var refNotTickets = map[string]bool{"UTF": true, "ISO": true, "SHA": true, "MD": true, "GPT": true, "TLS": true, "SSL": true,
	"X": true, "IPV": true, "HTTP": true, "CVE": true, "WIN": true, "AES": true, "RSA": true, "COVID": true, "PY": true,
	"LATIN": true, "ES": true, "H": true, "MP": true}

// ids records the identifiers of text.
func (c *refCollector) ids(text string, seq uint64) {
	for _, m := range refTicketRE.FindAllStringSubmatch(text, refMaxPerMessage) {
		prefix, _, _ := strings.Cut(m[1], "-")
		if !refNotTickets[strings.TrimRight(prefix, "0123456789")] {
			c.add(schemas.EvidenceID, m[1], seq, false)
		}
	}
	for _, m := range refCveRE.FindAllString(text, refMaxPerMessage) {
		c.add(schemas.EvidenceID, m, seq, false)
	}
	for _, m := range refIssueRE.FindAllStringSubmatch(text, refMaxPerMessage) {
		c.add(schemas.EvidenceID, "#"+m[1], seq, false)
	}
	seen := map[string]bool{}
	for _, m := range refCommitRE.FindAllStringSubmatch(text, refMaxPerMessage) {
		if h := strings.ToLower(m[1]); refIsCommitHash(h) {
			seen[h] = true
			c.add(schemas.EvidenceID, h, seq, false)
		}
	}
	for _, h := range refFullCommitRE.FindAllString(text, refMaxPerMessage) {
		if !seen[h] && refIsCommitHash(h) {
			c.add(schemas.EvidenceID, h, seq, false)
		}
	}
	for _, m := range refHttpRE.FindAllStringSubmatch(text, refMaxPerMessage) {
		c.add(schemas.EvidenceID, "HTTP "+m[1], seq, false)
	}
	for _, m := range refLintRE.FindAllString(text, refMaxPerMessage) {
		c.add(schemas.EvidenceID, m, seq, false)
	}
}

// numberRE is a number with a unit: words after an optional blank, symbols and
// one-letter units right after the number, or a currency sign before it.
var refNumberRE = regexp.MustCompile(`(?i)(?:[$€£]\s?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:\s?(?:k|m|bn)\b)?)|(?:\b(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:%|\s?(?:ms|µs|us|ns|secs?|seconds?|mins?|minutes?|hrs?|hours?|days?|weeks?|months?|years?|[kmgtp]i?b|bytes?|[kmg]hz|px|rem|dpi|fps|rps|qps|req/s|tokens?|cores?|cpus?|gpus?|threads|workers|replicas|nodes|kg|mg|lbs?|km|cm|mm|miles?|ft|°[cf]|usd|eur|gbp|dollars?|euros?|bags?|passengers?|nights?|adults?|children)\b|(?:s|h|m|k|g|x)\b))`)

// numbers records the numbers with units of a user message.
func (c *refCollector) numbers(text string, seq uint64) {
	for _, m := range refNumberRE.FindAllString(text, refMaxPerMessage) {
		c.add(schemas.EvidenceNumber, strings.Join(strings.Fields(m), " "), seq, false)
	}
}
