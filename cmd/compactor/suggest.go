package main

import "fmt"

// unknownCommand is the usage error of a command name that is none, with the nearest
// command's name when one is close enough to be a typo.
func unknownCommand(name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if s := suggestCommand(name); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return usageError{msg: msg, usage: overviewSynopsis()}
}

// suggestCommand is the listed command nearest to name by edit distance, when at most
// two edits (and fewer than half its letters) away; "" when none is.
func suggestCommand(name string) string {
	best, bestD := "", 3
	for _, c := range commands {
		if c.hidden {
			continue
		}
		if d := editDistance(name, c.name); d < bestD && 2*d < len([]rune(c.name)) {
			best, bestD = c.name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, with a swap of two neighbouring
// letters counting as one edit (the optimal string alignment distance).
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
