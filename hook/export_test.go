package hook

import "testing"

// NoDenseIndex makes the engines installed until t ends find connections
// without the index kept in their netFD (see connTable), as on a Go release
// whose netFD has no padding.
func NoDenseIndex(t testing.TB) {
	denseIndex = false
	t.Cleanup(func() { denseIndex = true })
}
