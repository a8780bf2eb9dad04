package trace

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
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
// same shape as a W3C trace-id. The bits come from math/rand/v2's global
// source (the runtime's per-thread ChaCha8, seeded from the OS): trace ids
// must be unique, not secret, and crypto/rand costs more (a system call
// per id on kernels without the getrandom vDSO, before 6.11).
func NewID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}
