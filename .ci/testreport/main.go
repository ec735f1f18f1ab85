// Command testreport reads `go test -json` from stdin and prints what a person needs:
// the summary line of every package (ok, FAIL, no test files), the whole output of every
// failed test and of every package that failed outside a test (a build error, a panic),
// and every skipped test with its reason. It exits 1 when anything failed, and also when
// a test skipped while the environment says CI=true: CI never passes by skipping.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

func main() {
	outputs := map[string][]string{} // package + "\x00" + test → output lines
	var failed, skipped, summaries []string
	passed, failedTests := 0, 0 // tests (subtests included), for the closing line
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			fmt.Println(string(line)) // not JSON: go test's own message, keep it
			continue
		}
		key := ev.Package + "\x00" + ev.Test
		switch ev.Action {
		case "build-output":
			outputs[ev.ImportPath+"\x00"] = append(outputs[ev.ImportPath+"\x00"], ev.Output)
		case "output":
			outputs[key] = append(outputs[key], ev.Output)
			if ev.Test == "" && isSummary(ev.Output) {
				summaries = append(summaries, strings.TrimRight(ev.Output, "\n"))
			}
		case "pass":
			if ev.Test != "" {
				passed++
			}
		case "fail":
			failed = append(failed, key)
			if ev.Test != "" {
				failedTests++
			}
		case "skip":
			if ev.Test != "" {
				skipped = append(skipped, key)
			}
		case "build-fail":
			failed = append(failed, ev.ImportPath+"\x00")
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "read go test -json:", err)
		os.Exit(1)
	}
	for _, k := range failed {
		pkg, test, _ := strings.Cut(k, "\x00")
		if test == "" {
			fmt.Printf("=== FAIL %s (outside any test)\n", pkg)
		} else {
			fmt.Printf("=== FAIL %s %s\n", pkg, test)
		}
		fmt.Print(strings.Join(outputs[k], ""))
	}
	sort.Strings(skipped)
	for _, k := range skipped {
		pkg, test, _ := strings.Cut(k, "\x00")
		fmt.Printf("SKIP %s %s: %s\n", pkg, test, skipReason(outputs[k]))
	}
	fmt.Println(strings.Join(summaries, "\n"))
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", passed, failedTests, len(skipped))
	status := 0
	if len(failed) > 0 {
		fmt.Printf("%d failures\n", len(failed))
		status = 1
	}
	if len(skipped) > 0 && os.Getenv("CI") == "true" {
		fmt.Printf("%d tests skipped with CI=true: a skip in CI is a failure\n", len(skipped))
		status = 1
	}
	os.Exit(status)
}

// isSummary reports whether a package-level output line is go test's summary of it.
func isSummary(s string) bool {
	for _, p := range []string{"ok  \t", "FAIL\t", "?   \t", "ok \t"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func skipReason(lines []string) string {
	var out []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, " ")
}
