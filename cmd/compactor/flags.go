package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// flagSet is the one way every command parses its command line: the standard flag
// package underneath (so -x, --x, --x=v and --x v all work), with long and short names,
// flags and arguments in any order (a "--" ends the flags, for an id that starts with
// a dash), -h/--help, and errors that say what is wrong with the flag instead of the
// flag package's own wording.
type flagSet struct {
	fs    *flag.FlagSet
	specs []*flagSpec
}

// flagSpec is one flag as help shows it.
type flagSpec struct {
	long, short string
	// arg names the flag's value in help ("" for a switch).
	arg   string
	usage string
	// group is the heading it is listed under ("" for the command's own flags).
	group string
}

// errHelp is what parse returns for -h or --help.
var errHelp = flag.ErrHelp

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs}
}

func (f *flagSet) add(v flag.Value, long, short, arg, usage, group string) {
	f.fs.Var(v, long, usage)
	if short != "" {
		f.fs.Var(v, short, usage)
	}
	f.specs = append(f.specs, &flagSpec{long: long, short: short, arg: arg, usage: usage, group: group})
}

func (f *flagSet) String(long, short, arg, usage string) *string {
	p := new(string)
	f.add((*stringValue)(p), long, short, arg, usage, "")
	return p
}

func (f *flagSet) Bool(long, short, usage string) *bool {
	p := new(bool)
	f.add((*boolValue)(p), long, short, "", usage, "")
	return p
}

func (f *flagSet) Duration(long, arg, usage string) *time.Duration {
	p := new(time.Duration)
	f.add((*durationValue)(p), long, "", arg, usage, "")
	return p
}

func (f *flagSet) Int(long, arg, usage string) *int {
	p := new(int)
	f.add((*intValue)(p), long, "", arg, usage, "")
	return p
}

func (f *flagSet) Uint64(long, arg, usage string) *uint64 {
	p := new(uint64)
	f.add((*uint64Value)(p), long, "", arg, usage, "")
	return p
}

// JSON is the --json switch of every command that prints.
func (f *flagSet) JSON() *bool {
	return f.Bool("json", "", "print JSON (one document) instead of text for people")
}

// inGroup lists the flags added by fn under a heading of their own.
func (f *flagSet) inGroup(group string, fn func()) {
	n := len(f.specs)
	fn()
	for _, s := range f.specs[n:] {
		s.group = group
	}
}

// parse parses args and returns the positional arguments. Flags may come before,
// between or after them; everything after "--" is positional.
func (f *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, f.explain(err)
		}
		rest := f.fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" && !f.takesValue(args, used-2) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// takesValue reports whether args[i] is a flag that takes the next argument as its
// value (so a "--" after it is that value, not the end of the flags).
func (f *flagSet) takesValue(args []string, i int) bool {
	if i < 0 || !strings.HasPrefix(args[i], "-") || strings.Contains(args[i], "=") {
		return false
	}
	fl := f.fs.Lookup(strings.TrimLeft(args[i], "-"))
	if fl == nil {
		return false
	}
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

var (
	reUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	reNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
	reBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): (.*)$`)
)

// explain turns an error of the flag package into one that names the flag as it is
// written (--name, -s) and says what it wants.
func (f *flagSet) explain(err error) error {
	msg := err.Error()
	if m := reUndefined.FindStringSubmatch(msg); m != nil {
		return usagef("unknown flag %s", dashed(m[1]))
	}
	if m := reNoValue.FindStringSubmatch(msg); m != nil {
		return usagef("%s needs a value", dashed(m[1]))
	}
	if m := reBadValue.FindStringSubmatch(msg); m != nil {
		return usagef("%s %q: %s", dashed(m[2]), m[1], m[3])
	}
	return usagef("%s", msg)
}

func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// The flag values: their Set errors say what a value must look like.
type (
	stringValue   string
	boolValue     bool
	durationValue time.Duration
	intValue      int
	uint64Value   uint64
)

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

func (v *boolValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		*v = true
	case "false", "0", "no":
		*v = false
	default:
		return errors.New("want true or false")
	}
	return nil
}
func (v *boolValue) String() string   { return fmt.Sprint(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration with its unit, e.g. 30s, 2m or 1h30m")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

func (v *intValue) Set(s string) error {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != strings.TrimPrefix(s, "+") {
		return errors.New("want a whole number")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return fmt.Sprint(int(*v)) }

func (v *uint64Value) Set(s string) error {
	var n uint64
	if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != s {
		return errors.New("want a whole number, 0 or more")
	}
	*v = uint64Value(n)
	return nil
}
func (v *uint64Value) String() string { return fmt.Sprint(uint64(*v)) }

// writeFlags lists the flags, grouped, aligned: "  -s, --server URL   usage".
func (f *flagSet) writeFlags(w io.Writer) {
	var groups []string
	seen := map[string]bool{}
	for _, s := range f.specs {
		if !seen[s.group] {
			seen[s.group] = true
			groups = append(groups, s.group)
		}
	}
	for i, g := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if g == "" {
			fmt.Fprintln(w, "Flags:")
		} else {
			fmt.Fprintf(w, "%s:\n", g)
		}
		tw := tabwriter.NewWriter(w, 2, 0, 3, ' ', 0)
		for _, s := range f.specs {
			if s.group != g {
				continue
			}
			name := "    --" + s.long
			if s.short != "" {
				name = "-" + s.short + ", --" + s.long
			}
			if s.arg != "" {
				name += " " + s.arg
			}
			fmt.Fprintf(tw, "  %s\t%s\n", name, s.usage)
		}
		if g == "" {
			fmt.Fprintf(tw, "  -h, --help\tthis help\n")
		}
		tw.Flush()
	}
	if !slices.Contains(groups, "") {
		if len(groups) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "Flags:")
		fmt.Fprintln(w, "  -h, --help   this help")
	}
}

// setDuration is a duration flag that knows whether it was given: 0 given differs
// from no flag.
type setDuration struct {
	d   time.Duration
	set bool
}

func (v *setDuration) Set(s string) error {
	var d durationValue
	if err := d.Set(s); err != nil {
		return err
	}
	v.d, v.set = time.Duration(d), true
	return nil
}

func (v *setDuration) String() string { return v.d.String() }
