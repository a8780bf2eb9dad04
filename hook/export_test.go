package hook

import (
	"net"
	"testing"
)

// NoDenseIndex makes the engines installed until t ends find connections
// without the index kept in their netFD (see connTable), as on a Go release
// whose netFD has no padding.
func NoDenseIndex(t testing.TB) {
	denseIndex = false
	t.Cleanup(func() { denseIndex = true })
}

// ServeTCP is serveTCP, for the tests of package hook_test.
func ServeTCP(t *testing.T, handle func(net.Conn)) string { return serveTCP(t, handle) }

// RandomFuncs returns the code addresses of the functions RandomAll
// patches.
func RandomFuncs() map[string]uintptr {
	out := map[string]uintptr{}
	mt, _ := mathTargets()
	ct, _ := cryptoTargets()
	for _, t := range append(mt, ct...) {
		out[t.name] = *(*uintptr)(t.word)
	}
	return out
}
