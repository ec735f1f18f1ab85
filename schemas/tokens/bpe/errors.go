package bpe

import "errors"

// ErrUnknownEncoding is returned by New for an encoding this package does not support.
var ErrUnknownEncoding = errors.New("unknown encoding")
