package summarizer

import (
	"errors"

	"github.com/compactor/compactor/summarizer/summary"
)

// ErrConfig is matched by every configuration error of this package.
var ErrConfig = errors.New("invalid summarizer config")

// ErrContextLength is summary.ErrContextLength: a model refused the input as longer than
// its context window. The pool then sends less.
var ErrContextLength = summary.ErrContextLength

// ErrNothingFits is matched by the error of a summarization that cannot fit the
// summarizer's window however it is cut: a request leaves too little room beside the
// prompt and the summary's cap, the endpoint refused ever smaller requests down to that
// floor, or merging did not shrink the summaries. It is permanent: the worker writes
// the deterministic fallback summary at once instead of retrying.
var ErrNothingFits = errors.New("nothing fits the summarizer's window")
