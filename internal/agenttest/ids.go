package agenttest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"regexp"
)

// IDPattern matches the trace ids NewID makes.
var IDPattern = regexp.MustCompile(`rt[0-9a-f]{16}`)

// eachID calls f with every trace id of NewID's shape in p, in order; it
// stops when f returns false. It is what IDPattern matches, without the
// regexp engine (the mock checks every frame with it).
func eachID(p []byte, f func(id []byte) bool) {
	for i := 0; i+18 <= len(p); {
		j := bytes.Index(p[i:], []byte("rt"))
		if j < 0 || i+j+18 > len(p) {
			return
		}
		at := i + j
		if isHex(p[at+2 : at+18]) {
			if !f(p[at : at+18]) {
				return
			}
			i = at + 18
			continue
		}
		i = at + 1
	}
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NewID returns a fresh trace id matching IDPattern.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "rt" + hex.EncodeToString(b[:])
}
