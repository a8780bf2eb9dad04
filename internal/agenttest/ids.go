package agenttest

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
)

// IDPattern matches the trace ids NewID makes.
var IDPattern = regexp.MustCompile(`rt[0-9a-f]{16}`)

// NewID returns a fresh trace id matching IDPattern.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "rt" + hex.EncodeToString(b[:])
}
