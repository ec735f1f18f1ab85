package summarizer

import "github.com/compactor/compactor/summarizer/summary"

// The pool works with the summarizer types of package summary, which links no NATS.
type (
	// Input is summary.Input.
	Input = summary.Input
	// Output is summary.Output.
	Output = summary.Output
	// Summarizer is summary.Summarizer.
	Summarizer = summary.Summarizer
)
