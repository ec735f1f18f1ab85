package schemas

import (
	"crypto/rand"
	"encoding/hex"
)

// NewRequestID returns a random request id: 32 hex digits.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
