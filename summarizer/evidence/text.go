package evidence

import (
	"regexp"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// maxPerMessage bounds the matches of one pattern taken from one message.
const maxPerMessage = 200

// maxURLBytes is the longest URL kept: longer ones are mostly signed or data-laden.
const maxURLBytes = 300

// urlRE is an http or https URL; trailing punctuation is trimmed after matching. A
// redacted part (Redacted) is part of the URL.
var urlRE = regexp.MustCompile(`https?://(?:[^\s<>"'` + "`" + `\\^{}|\[\]]|` + regexp.QuoteMeta(Redacted) + `)+`)

// urls records the http(s) URLs of text.
func (c *collector) urls(text string, seq uint64) {
	if !strings.Contains(text, "://") {
		return
	}
	for _, u := range urlRE.FindAllString(text, maxPerMessage) {
		u = trimURL(u)
		if len(u) > len("https://x") && len(u) <= maxURLBytes {
			c.add(schemas.EvidenceURL, u, seq, false)
		}
	}
}

// trimURL drops punctuation that ends the sentence around a URL, and a closing
// bracket or parenthesis it does not open.
func trimURL(u string) string {
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
	ticketRE = regexp.MustCompile(`(?:^|[^\w-])([A-Z][A-Z0-9]{1,9}-[0-9]{1,7})(?:$|[^\w-])`)
	// cveRE: CVE-2024-12345.
	cveRE = regexp.MustCompile(`\bCVE-[0-9]{4}-[0-9]{4,7}\b`)
	// issueRE: #123 after a blank, a bracket or the start, not in the middle of a word.
	issueRE = regexp.MustCompile(`(?:^|[\s(\[])#([0-9]{1,7})\b`)
	// commitRE: a hash named as a commit, or a full 40-character hash.
	commitRE     = regexp.MustCompile(`(?i)\b(?:commit|sha|revision)\s*:?\s*([0-9a-f]{7,40})\b`)
	fullCommitRE = regexp.MustCompile(`\b[0-9a-f]{40}\b`)
	// httpRE: HTTP 503, HTTP/1.1 404, status code 500 (client and server errors only).
	httpRE = regexp.MustCompile(`(?i)\b(?:HTTP(?:/[0-9](?:\.[0-9])?)?|status(?:\s+code)?)[\s:]+([45][0-9]{2})\b`)
	// lintRE: compiler and linter codes such as E1101, W0611, F401, TS2304, CS0246.
	lintRE = regexp.MustCompile(`\b(?:[EWF][0-9]{3,5}|TS[0-9]{4}|CS[0-9]{4})\b`)
)

// notTickets are prefixes of ABC-123 shaped words that are names, not ids.
var notTickets = map[string]bool{"UTF": true, "ISO": true, "SHA": true, "MD": true, "GPT": true, "TLS": true, "SSL": true,
	"X": true, "IPV": true, "HTTP": true, "CVE": true, "WIN": true, "AES": true, "RSA": true, "COVID": true, "PY": true,
	"LATIN": true, "ES": true, "H": true, "MP": true}

// extractPatterns are the identifier expressions with their anchors (see pattern);
// fullCommitRE has none, and runs only on a text with 40 hexadecimal digits in a row.
var (
	ticketPat = &pattern{re: ticketRE, anchors: [][]string{followed([]string{"-"}, digits...)}}
	cvePat    = &pattern{re: cveRE, anchors: [][]string{{"CVE-"}}, lineLocal: true}
	issuePat  = &pattern{re: issueRE, anchors: [][]string{followed([]string{"#"}, digits...)}, lineLocal: true}
	commitPat = &pattern{re: commitRE, anchors: [][]string{followed([]string{"commit", "sha", "revision"}, append([]string{" ", "\t", "\n", "\r", "\f", ":", "a", "b", "c", "d", "e", "f"}, digits...)...)},
		seps: punctuation + "-,./%$"}
	httpPat = &pattern{re: httpRE, anchors: [][]string{append(followed([]string{"http"}, "/", ":", " ", "\t", "\n", "\r", "\f"), "status")},
		seps: punctuation + "-,%$"}
	lintPat = &pattern{re: lintRE, anchors: [][]string{followed([]string{"E", "W", "F", "TS", "CS"}, digits...)}, lineLocal: true}

	extractPatterns = []*pattern{ticketPat, cvePat, issuePat, commitPat, httpPat, lintPat, numberPat}
)

var digits = []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// punctuation are bytes that none of the commit, HTTP status and number expressions
// matches: each runs only between them (pattern.seps).
const punctuation = `"'()[]{}<>;=|&*#@!?\` + "`~^+"

// ids records the identifiers of t's text.
func (c *collector) ids(t *scan, seq uint64) {
	text := t.s
	for _, m := range t.matches(ticketPat, maxPerMessage) {
		id := text[m[2]:m[3]]
		prefix, _, _ := strings.Cut(id, "-")
		if !notTickets[strings.TrimRight(prefix, "0123456789")] {
			c.add(schemas.EvidenceID, id, seq, false)
		}
	}
	for _, m := range t.matches(cvePat, maxPerMessage) {
		c.add(schemas.EvidenceID, text[m[0]:m[1]], seq, false)
	}
	for _, m := range t.matches(issuePat, maxPerMessage) {
		c.add(schemas.EvidenceID, "#"+text[m[2]:m[3]], seq, false)
	}
	seen := map[string]bool{}
	for _, m := range t.matches(commitPat, maxPerMessage) {
		if h := strings.ToLower(text[m[2]:m[3]]); isCommitHash(h) {
			seen[h] = true
			c.add(schemas.EvidenceID, h, seq, false)
		}
	}
	if hexRun(text, 40) {
		for _, h := range fullCommitRE.FindAllString(text, maxPerMessage) {
			if !seen[h] && isCommitHash(h) {
				c.add(schemas.EvidenceID, h, seq, false)
			}
		}
	}
	for _, m := range t.matches(httpPat, maxPerMessage) {
		c.add(schemas.EvidenceID, "HTTP "+text[m[2]:m[3]], seq, false)
	}
	for _, m := range t.matches(lintPat, maxPerMessage) {
		c.add(schemas.EvidenceID, text[m[0]:m[1]], seq, false)
	}
}

// hexRun says s holds n lower-case hexadecimal digits in a row, as every match of
// fullCommitRE does.
func hexRun(s string, n int) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
			if run++; run == n {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// numberRE is a number with a unit: words after an optional blank, symbols and
// one-letter units right after the number, or a currency sign before it.
var numberRE = regexp.MustCompile(`(?i)(?:[$€£]\s?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:\s?(?:k|m|bn)\b)?)|(?:\b(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:%|\s?(?:ms|µs|us|ns|secs?|seconds?|mins?|minutes?|hrs?|hours?|days?|weeks?|months?|years?|[kmgtp]i?b|bytes?|[kmg]hz|px|rem|dpi|fps|rps|qps|req/s|tokens?|cores?|cpus?|gpus?|threads|workers|replicas|nodes|kg|mg|lbs?|km|cm|mm|miles?|ft|°[cf]|usd|eur|gbp|dollars?|euros?|bags?|passengers?|nights?|adults?|children)\b|(?:s|h|m|k|g|x)\b))`)

// numberPat is numberRE's pattern: every match holds a digit.
var numberPat = &pattern{re: numberRE, anchors: [][]string{digits}, seps: punctuation + "-:"}

// numbers records the numbers with units of a user message (t's text).
func (c *collector) numbers(t *scan, seq uint64) {
	for _, m := range t.matches(numberPat, maxPerMessage) {
		c.add(schemas.EvidenceNumber, strings.Join(strings.Fields(t.s[m[0]:m[1]]), " "), seq, false)
	}
}
