package eval

import "errors"

var (
	// ErrNoInput: no conversation to replay (no argument, an empty directory).
	ErrNoInput = errors.New("no input")
	// ErrBadInput: a file that cannot be read or holds a line that is not a valid
	// message; the error names the file and the line.
	ErrBadInput = errors.New("bad input")
	// ErrConfig: a setting eval cannot run with (an unknown strategy, a window too
	// small, a knob the server does not know).
	ErrConfig = errors.New("invalid eval config")
)
