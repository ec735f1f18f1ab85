package summarizer

import "errors"

// ErrConfig is matched by every configuration error of this package.
var ErrConfig = errors.New("invalid summarizer config")

// ErrContextLength is what a Summarizer returns (wrapped) when its model refused the
// input as longer than its context window. The pool then summarizes smaller chunks.
var ErrContextLength = errors.New("summarizer context length exceeded")
