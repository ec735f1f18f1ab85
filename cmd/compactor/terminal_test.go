package main

import (
	"strings"
	"testing"
)

// A conversation's policy is written by clients of compactor.policy (any service with
// the api subjects), so its values are input like any other. `compactor policy` prints
// them to an operator's terminal: a control character must not reach it raw (ESC
// starts a terminal control sequence: OSC 52 writes the clipboard, others retitle the
// window or hide text).
func TestPolicyTextDoesNotPrintControlCharacters(t *testing.T) {
	withStack(t, testEnv(t, 128000), nil)
	if _, _, err := cli(t, `{"role":"user","content":"hi"}`+"\n", "publish", "esc"); err != nil {
		t.Fatal(err)
	}
	const hostile = "keep paths\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J"
	if _, _, err := cli(t, "", "policy", "set", "esc", "instructions="+hostile); err != nil {
		t.Fatalf("policy set: %v", err)
	}
	out, _, err := cli(t, "", "policy", "get", "esc")
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("compactor policy printed a raw control sequence from the stored policy:\n%q", out)
	}
}

// textOut escapes every control character but tab and newline, also C1 ones and bytes
// that are not UTF-8, and keeps a character split across two writes whole.
func TestTextOutEscapesControlCharacters(t *testing.T) {
	var b strings.Builder
	w := newTextOut(&b)
	for _, part := range []string{"a\x1b[2Jb\x07\tc\n", "d\r\u0085e\x7f", "é"[:1], "é"[1:] + "\xff!"} {
		if n, err := w.Write([]byte(part)); err != nil || n != len(part) {
			t.Fatalf("Write(%q) = %d, %v", part, n, err)
		}
	}
	if got, want := b.String(), `a\x1b[2Jb\x07`+"\tc\n"+`d\x0d\u0085e\x7fé\xff!`; got != want {
		t.Fatalf("wrote %q; want %q", got, want)
	}
}
