package trace

import (
	"crypto/rand"
	"encoding/hex"
)

// MaxIDLen is the longest trace id accepted anywhere (DESIGN.md 3.2).
const MaxIDLen = 64

// ValidID reports whether id is a well-formed trace id: 1–64 characters of
// [0-9A-Za-z._-]. Ids from untrusted input that fail this check are ignored.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return false
		}
	}
	return true
}

func idByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
		c == '.' || c == '_' || c == '-'
}

// NewID returns a fresh random trace id of 32 lowercase hex characters, the
// same shape as a W3C trace-id.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ crashes
		// instead); keep the zero id rather than panic in a service.
		return "00000000000000000000000000000000"
	}
	return hex.EncodeToString(b[:])
}
