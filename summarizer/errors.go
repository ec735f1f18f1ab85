package summarizer

import "errors"

// ErrConfig is matched by every configuration error of this package.
var ErrConfig = errors.New("invalid summarizer config")
