package hook

import (
	"net"
	"reflect"
	"testing"
	"unsafe"
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

// PatchGRPC patches grpc-go's outgoing metadata as Install does in replay
// mode, with an engine active that only the patch consults, until t ends.
func PatchGRPC(t testing.TB) {
	tg, err := grpcTarget()
	if err != nil {
		t.Fatal(err)
	}
	undo, err := apply(tg)
	if err != nil {
		t.Fatal(err)
	}
	if !active.CompareAndSwap(nil, &engine{cfg: &resolvedConfig{Config: Config{Mode: Replay}}}) {
		undo()
		t.Fatal("an engine is active")
	}
	t.Cleanup(func() {
		active.Store(nil)
		undo()
	})
}

// ForceTLSPanic makes every TLS hook panic where it looks up its
// connection, until t ends.
func ForceTLSPanic(t testing.TB) {
	tlsStatePanic.Store(true)
	t.Cleanup(func() { tlsStatePanic.Store(false) })
}

// MethodWord is methodWord, for the tests of package hook_test.
func MethodWord(t reflect.Type, name string) unsafe.Pointer { return methodWord(t, name) }

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

// ForceH2RewritePanic makes the outbound HTTP/2 rewriter panic, until t
// ends.
func ForceH2RewritePanic(t testing.TB) {
	h2RewritePanic.Store(true)
	t.Cleanup(func() { h2RewritePanic.Store(false) })
}

// H2ServeFuncs returns the code addresses of the HTTP/2 servers'
// serverConnBaseContext the agent patches, by name.
func H2ServeFuncs() map[string]uintptr {
	out := map[string]uintptr{}
	ts, _ := h2ServeTargets()
	for _, t := range ts {
		out[t.name] = *(*uintptr)(t.word)
	}
	return out
}
