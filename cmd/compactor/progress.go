package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress is a one-line progress bar on a terminal: redrawn in place at most ten
// times a second, cleared when done, and able to print lines above itself. It draws
// only when its writer is a terminal (isTerminal), so nothing of it reaches a pipe, a
// file or a test's captured output; a nil *progress does nothing.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	unit  string // "B" for bytes (shown as KiB, MiB), else a word such as "steps"
	total int64  // 0: unknown, a counter without a bar
	done  int64
	note  string
	start time.Time
	drawn time.Time
	width int // of the last line drawn, to clear it
	now   func() time.Time
}

// isTerminal reports whether w is a terminal (a character device; TERM=dumb is not).
func isTerminal(w io.Writer, lookup func(string) (string, bool)) bool {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	if t, _ := lookup("TERM"); t == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// newProgress returns a bar on w, or nil when w is not a terminal.
func newProgress(w io.Writer, lookup func(string) (string, bool), label, unit string, total int64) *progress {
	if !isTerminal(w, lookup) {
		return nil
	}
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap() // its \r are its own
	}
	return startProgress(w, label, unit, total, time.Now)
}

func startProgress(w io.Writer, label, unit string, total int64, now func() time.Time) *progress {
	return &progress{w: w, label: label, unit: unit, total: total, start: now(), now: now}
}

// set records how much is done and what is happening, and redraws when due.
func (p *progress) set(done int64, note string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.note = done, note
	if t := p.now(); t.Sub(p.drawn) >= 100*time.Millisecond {
		p.drawn = t
		p.draw()
	}
}

// println prints a line above the bar.
func (p *progress) println(line string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(p.w, line)
	p.draw()
}

// finish clears the bar.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *progress) clear() {
	if p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

func (p *progress) draw() {
	line := p.render()
	p.clear()
	fmt.Fprint(p.w, line)
	p.width = len([]rune(line))
}

// render is the bar's text: "publish [=====>    ]  45%  1.2 MiB/2.6 MiB  12s  line 1,234".
func (p *progress) render() string {
	elapsed := p.now().Sub(p.start).Round(time.Second)
	var b strings.Builder
	b.WriteString(p.label)
	if p.total > 0 {
		const width = 24
		frac := min(float64(p.done)/float64(p.total), 1)
		n := int(frac * width)
		bar := strings.Repeat("=", n)
		if n < width {
			bar += ">" + strings.Repeat(" ", width-n-1)
		}
		fmt.Fprintf(&b, " [%s] %3.0f%%  %s/%s", bar, 100*frac, p.amount(p.done), p.amount(p.total))
	} else {
		fmt.Fprintf(&b, "  %s", p.amount(p.done))
	}
	fmt.Fprintf(&b, "  %s", elapsed)
	if p.note != "" {
		b.WriteString("  " + p.note)
	}
	return b.String()
}

func (p *progress) amount(n int64) string {
	if p.unit == "B" {
		return humanBytes(uint64(n))
	}
	return thousands(n) + " " + p.unit
}

// humanBytes is n in B, KiB, MiB or GiB.
func humanBytes(n uint64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// thousands is n with a comma every three digits.
func thousands[T int | int64 | uint64](n T) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}
