package schemas

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// NewRequestID returns a random request id: 32 hex digits.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ForgetKey is the key of a conversation's tombstone in the forget bucket: the SHA-256
// of its id, in hex, so that the bucket holds no byte of the id. (An id that can be
// guessed can be confirmed as recently forgotten by whoever may read the bucket.)
func ForgetKey(conv string) string {
	h := sha256.Sum256([]byte(conv))
	return hex.EncodeToString(h[:])
}
