package split

import "errors"

// ErrUnknownStrategy is returned by Apply for a name not in Strategies.
var ErrUnknownStrategy = errors.New("unknown strategy")

// ErrInvalidInput is returned by Apply for knobs that fail Validate or an Input whose
// Carried count does not fit its entries.
var ErrInvalidInput = errors.New("invalid split input")
