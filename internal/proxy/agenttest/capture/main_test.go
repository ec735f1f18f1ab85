package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is one captured request in ../testdata.
type fixture struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    map[string]any    `json:"body"`
}

// TestFixtures checks the captured requests' form, and that the script still makes the decision
// that each file's name records: the fixtures double as the script's regression test.
func TestFixtures(t *testing.T) {
	files, err := filepath.Glob("../testdata/*/*.json")
	if err != nil || len(files) < 50 {
		t.Fatalf("fixtures: %d files, %v", len(files), err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx fixture
		if err := json.Unmarshal(raw, &fx); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if fx.Method != "POST" || !strings.HasPrefix(fx.Path, "/v1") || fx.Body == nil {
			t.Errorf("%s: method %q path %q body %v", f, fx.Method, fx.Path, fx.Body != nil)
		}
		for k, v := range fx.Headers {
			if secretHeader.MatchString(k) && v != "REDACTED" {
				t.Errorf("%s: header %s not redacted", f, k)
			}
		}
		name := filepath.Base(f)
		if strings.Contains(name, "-answered-429") {
			continue
		}
		kind := kindOf(strings.SplitN(fx.Path, "?", 2)[0])
		a := decide(kind, fx.Body, "")
		var got string
		switch {
		case a.summary:
			got = "-summary-request"
		case a.json:
			got = "-json-side-request"
		case a.tool != "":
			got = "-tool-call-answer"
		default:
			got = "-text-answer"
		}
		if !strings.HasSuffix(name, got+".json") {
			t.Errorf("%s: the script now answers %s", f, got)
		}
	}
}
