package eval

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/compactor/compactor/schemas"
)

// Limits on what eval reads: a conversation can hold 100,000 messages.
const (
	// MaxMessages is the most messages one file may hold.
	MaxMessages = 100_000
	// MaxLineBytes is the longest line (one message) read.
	MaxLineBytes = 16 << 20
	// MaxFiles is the most conversations one run replays.
	MaxFiles = 10_000
)

// Conversation is one JSONL file: one OpenAI chat message a line.
type Conversation struct {
	// Name is the file's base name; Path where it was read.
	Name, Path string
	Messages   []schemas.Message
}

// Expand turns the arguments (files and directories) into the files to read: a
// directory gives its *.jsonl files (not recursively), sorted by name.
func Expand(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("%w: name a directory or a JSONL file", ErrNoInput)
	}
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		found, err := filepath.Glob(filepath.Join(a, "*.jsonl"))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadInput, a, err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%w: no *.jsonl file in directory %s", ErrNoInput, a)
		}
		slices.Sort(found)
		files = append(files, found...)
	}
	if len(files) > MaxFiles {
		return nil, fmt.Errorf("%w: %d files, at most %d in one run", ErrBadInput, len(files), MaxFiles)
	}
	return files, nil
}

// Load reads one conversation. A line that is not a valid message fails the whole
// file, naming the file and the line: a skipped line would skew every figure. Blank
// lines are allowed.
func Load(path string) (Conversation, error) {
	f, err := os.Open(path)
	if err != nil {
		return Conversation{}, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	defer f.Close()
	c, err := Read(f, path)
	c.Name, c.Path = filepath.Base(path), path
	return c, err
}

// Read decodes a conversation from r; name is used in errors.
func Read(r io.Reader, name string) (Conversation, error) {
	var c Conversation
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if len(c.Messages) == MaxMessages {
			return c, fmt.Errorf("%w: %s:%d: more than %d messages in one conversation", ErrBadInput, name, line, MaxMessages)
		}
		m, err := schemas.DecodeMessage(b)
		if err != nil {
			return c, fmt.Errorf("%w: %s:%d: %w", ErrBadInput, name, line, err)
		}
		c.Messages = append(c.Messages, m)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return c, fmt.Errorf("%w: %s:%d: a line over %d bytes", ErrBadInput, name, line+1, MaxLineBytes)
		}
		return c, fmt.Errorf("%w: %s: %w", ErrBadInput, name, err)
	}
	if len(c.Messages) == 0 {
		return c, fmt.Errorf("%w: %s: no message", ErrBadInput, name)
	}
	if err := checkToolPairs(c.Messages); err != nil {
		return c, fmt.Errorf("%w: %s: %w", ErrBadInput, name, err)
	}
	return c, nil
}

// checkToolPairs refuses a history the pipeline would refuse mid-replay: a tool
// message that answers no open call of the newest assistant tool-call message.
func checkToolPairs(msgs []schemas.Message) error {
	open := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Role == schemas.RoleTool:
			if !open[m.ToolCallID] {
				return fmt.Errorf("message %d: tool message answers no open tool call (tool_call_id %q)", i+1, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		case m.HasToolCalls():
			clear(open)
			for _, tc := range m.ToolCalls {
				open[tc.ID] = true
			}
		}
	}
	return nil
}
