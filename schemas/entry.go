package schemas

import "time"

// Entry is one message as stored in the CHAT stream: its stream sequence, the time the
// server stored it, and the decoded message. Err is set, and Message is empty, when the
// stored payload broke the wire contract; readers report and skip such entries.
type Entry struct {
	Seq     uint64
	Time    time.Time
	Message Message
	Err     error
}

// Valid reports whether the entry decoded into a valid message.
func (e *Entry) Valid() bool { return e.Err == nil }
