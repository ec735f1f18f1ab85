package evidence

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
)

// The fast paths are checked against the reference copy of the code they replaced
// (the ref_*_test.go files): same bytes, same items, for every corpus message and every
// fuzz input.

// corpusTexts returns every text the evidence code redacts in the corpus: each
// message's content and each tool call's arguments.
func corpusTexts(tb testing.TB) []string {
	var out []string
	for _, c := range corpustest.Load(tb) {
		for _, e := range c.Entries {
			out = append(out, e.Message.Content.String())
			for _, tc := range e.Message.ToolCalls {
				out = append(out, tc.Function.Name, tc.Function.Arguments)
			}
		}
	}
	return out
}

// TestCorpusRedactMatchesTheReference: Redact and RedactPrefix give the reference's
// bytes for every message text and tool-call argument of the corpus, and for every line
// of them (a value short enough to be a single item).
func TestCorpusRedactMatchesTheReference(t *testing.T) {
	n := 0
	for _, s := range corpusTexts(t) {
		checkRedact(t, s)
		n++
		for line := range strings.SplitSeq(s, "\n") {
			if line != s {
				if got, want := Redact(line), refRedact(line); got != want {
					t.Fatalf("Redact(%.200q)\n got %.300q\nwant %.300q", line, got, want)
				}
				n++
			}
		}
	}
	t.Logf("%d texts and lines", n)
}

// checkAnchors: the automata find in s exactly the anchors strings.Contains finds, and
// each line-local pattern's finders where the first of a group's anchors ends.
func checkAnchors(t *testing.T, s string) {
	t.Helper()
	sc := newScan(s)
	lower := asciiLower(s)
	for key, id := range anchorIDs {
		hay := s
		if key[0] == 'f' {
			hay = lower
		}
		var bit anchorBits
		bit.add(id)
		if got, want := sc.found.meets(&bit), strings.Contains(hay, key[1:]); got != want {
			t.Fatalf("anchor %q (%c) found %v in %.200q; strings.Contains says %v", key[1:], key[0], got, s, want)
		}
	}
	for _, p := range patterns {
		for g, f := range p.finders {
			hay := s
			if p.fold {
				hay = lower
			}
			want := -1 // where the anchor that ends first ends
			for _, a := range p.anchors[g] {
				if i := strings.Index(hay, a); i >= 0 && (want < 0 || i+len(a) < want) {
					want = i + len(a)
				}
			}
			if got := f.index(s); got != want {
				t.Fatalf("pattern %s group %d: index %d in %.200q; the first anchor ends at %d", p.re, g, got, s, want)
			}
		}
	}
}

func checkRedact(t *testing.T, s string) {
	t.Helper()
	if got, want := Redact(s), refRedact(s); got != want {
		t.Fatalf("Redact(%.200q)\n got %.300q\nwant %.300q", s, got, want)
	}
	for _, n := range []int{100, 4096} {
		if len(s) <= n {
			continue // Redact(s), checked above
		}
		got, gotMore := RedactPrefix(s, n)
		want, wantMore := refRedactPrefix(s, n)
		if got != want || gotMore != wantMore {
			t.Fatalf("RedactPrefix(%.200q, %d)\n got %.300q, %v\nwant %.300q, %v", s, n, got, gotMore, want, wantMore)
		}
	}
}

// TestAnchorsFound: the automata find every anchor a text holds, and only those, in
// every corpus text and in texts built of the anchors themselves (in upper case, cut,
// overlapping, next to each other).
func TestAnchorsFound(t *testing.T) {
	var all []string
	for key := range anchorIDs {
		all = append(all, key[1:])
	}
	slices.Sort(all)
	joined := strings.Join(all, "")
	for _, s := range []string{joined, strings.ToUpper(joined), strings.Join(all, " x"), joined[1:], "\u212aey=1 ſecret", ""} {
		checkAnchors(t, s)
	}
	for i := range all {
		for j := range all {
			checkAnchors(t, all[i][:len(all[i])/2]+all[j])
			checkAnchors(t, strings.ToUpper(all[i])+all[j][1:])
		}
	}
	if corpustest.Dir() != "" || os.Getenv("CI") == "true" {
		for _, s := range corpusTexts(t) {
			checkAnchors(t, s)
		}
	}
}

// TestCorpusExtractMatchesTheReference: Extract and Merge give the reference's items
// for every corpus conversation, whole and as two compactions (the second carrying the
// first's evidence forward).
func TestCorpusExtractMatchesTheReference(t *testing.T) {
	for _, c := range corpustest.Load(t) {
		checkExtract(t, c.Name, c.Entries)
		half := len(c.Entries) / 2
		prev, refPrev := Merge(nil, c.Entries[:half], uint64(half)), refMerge(nil, c.Entries[:half], uint64(half))
		if !reflect.DeepEqual(prev, refPrev) {
			t.Fatalf("%s: Merge of the first half differs from the reference", c.Name)
		}
		through := uint64(len(c.Entries))
		if got, want := Merge(prev, c.Entries[half:], through), refMerge(refPrev, c.Entries[half:], through); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Merge of the second half differs from the reference", c.Name)
		}
	}
}

func checkExtract(t *testing.T, name string, entries []schemas.Entry) {
	t.Helper()
	got, want := Extract(entries), refExtract(entries)
	if reflect.DeepEqual(got, want) {
		return
	}
	gotSet := map[schemas.EvidenceItem]bool{}
	for _, it := range got {
		gotSet[it] = true
	}
	for _, it := range want {
		if !gotSet[it] {
			t.Errorf("%s: missing %+v", name, it)
		}
		delete(gotSet, it)
	}
	for it := range gotSet {
		t.Errorf("%s: extra %+v", name, it)
	}
	t.FailNow()
}

// FuzzRedact: Redact and RedactPrefix always give the reference's bytes.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"export GITHUB_TOKEN=ghp_4fR8tY2uI6oP0aS3dF7gH1jK5lZ9xC2vB6nM",
		`curl -H "Authorization: Bearer abc123def456ghi789" https://u:p4ss@x.example/?api_key=abcd1234efgh`,
		"password: hunter22\n  - token: 'Q9x8Rt7Yu6'\n{\"client_secret\": \"abc\"}",
		"mysql -u root -psecret123 db; echo pw | docker login --password-stdin; htpasswd -b f u pw",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
		"ALTER USER app WITH PASSWORD 'x'; aws configure set aws_secret_access_key abc",
		"\u212aEY=abc123456 ſecret=x Token := \"v\" sk-proj-Zq3xT9vLm2Kp8RwY4bNc7Hd1",
		"AKIAIOSFODNN7EXAMPLE eyJhbGciOiJI.eyJzdWIiOiIx.sig hooks.slack.com/services/T0/B1/x",
	} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		checkAnchors(t, s)
		if got, want := Redact(s), refRedact(s); got != want {
			t.Fatalf("Redact(%q)\n got %q\nwant %q", s, got, want)
		}
		got, gotMore := RedactPrefix(s, n)
		want, wantMore := refRedactPrefix(s, n)
		if got != want || gotMore != wantMore {
			t.Fatalf("RedactPrefix(%q, %d)\n got %q, %v\nwant %q, %v", s, n, got, gotMore, want, wantMore)
		}
	})
}

// FuzzExtract: Extract gives the reference's items for a user message, and an
// assistant message with a tool call, built from the fuzz strings.
func FuzzExtract(f *testing.F) {
	f.Add("see https://x.example/a?token=abc123456 and PROJ-12, #4, CVE-2024-1234, HTTP 503, 5 GB, $3.50",
		"bash", `{"command":"cd /src && sed -i s/a/b/ x.go > out.txt; git show 1a2b3c4d"}`)
	f.Add("```bash\n$ rm -rf build/ && cp a.txt b/\n```\ncommit abcdef1234 E1101 TS2304",
		"str_replace_editor", `{"command":"create","path":"./a/../b.py","file_text":"see http://h/x"}`)
	f.Add("export API_KEY=abc123 ls ~/x.txt", "run_shell", `mysql -u r -pS3cret db < in.sql`)
	f.Add("(commit:abc1234;sha 0f1e2d3c) [HTTP/1.1 404] status code\n503, $1,200.50k (5 GB) 3x faster; 10ms-20ms=30 req/s",
		"bash", `{"command":"git show abc1234"}`)
	// more matches than maxPerMessage, three a line, for the line-local patterns
	var many strings.Builder
	for i := range 250 {
		fmt.Fprintf(&many, "#%d #%d #%d E%04d W%04d F%04d CVE-2024-%04d AB-%d\n", i, i+1000, i+2000, 1000+i, 1000+i, 1000+i, 1000+i, i)
	}
	f.Add(many.String(), "bash", `{"command":"echo ok"}`)
	f.Fuzz(func(t *testing.T, text, tool, args string) {
		user := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)}
		asst := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(text),
			ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: tool, Arguments: args}}}}
		checkExtract(t, "fuzz", []schemas.Entry{{Seq: 1, Message: user}, {Seq: 2, Message: asst}})
	})
}
