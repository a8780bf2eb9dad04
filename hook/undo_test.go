package hook_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"reflect"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/agiledragon/gomonkey/v2/creflect"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
)

// patchedFuncs returns the code addresses of the functions replay mode
// patches with RETRACE_RANDOM=all.
func patchedFuncs() map[string]uintptr {
	conn := reflect.PointerTo(reflect.TypeFor[net.TCPConn]().Field(0).Type)
	pcs := map[string]uintptr{
		"syscall.Connect":       reflect.ValueOf(syscall.Connect).Pointer(),
		"syscall.GetsockoptInt": reflect.ValueOf(syscall.GetsockoptInt).Pointer(),
		"time.Now":              reflect.ValueOf(time.Now).Pointer(),
	}
	if w, ok := creflect.MethodByName(reflect.TypeFor[*net.Resolver](), "internetAddrList"); ok {
		pcs["Resolver.internetAddrList"] = *(*uintptr)(w)
	}
	for _, name := range []string{"Read", "Write", "Close"} {
		m, _ := conn.MethodByName(name)
		pcs["conn."+name] = m.Func.Pointer()
	}
	m, _ := reflect.TypeFor[*http.Transport]().MethodByName("RoundTrip")
	pcs["Transport.RoundTrip"] = m.Func.Pointer()
	for _, name := range []string{"Read", "Write", "handshakeContext"} {
		pcs["tls.Conn."+name] = *(*uintptr)(hook.MethodWord(reflect.TypeFor[*tls.Conn](), name))
	}
	for name, pc := range hook.RandomFuncs() {
		pcs[name] = pc
	}
	for name, pc := range hook.H2ServeFuncs() {
		pcs[name] = pc
	}
	return pcs
}

func codeBytes(pc uintptr) string {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&pc))
	return string(unsafe.Slice((*byte)(p), 24))
}

func snapshot() map[string]string {
	out := map[string]string{}
	for name, pc := range patchedFuncs() {
		out[name] = codeBytes(pc)
	}
	return out
}

// TestUndoRestores: Mode Off patches nothing; Install patches every
// function; undo (twice) restores their exact bytes. A connection works
// before, while and after the hooks are in place.
func TestUndoRestores(t *testing.T) {
	line := agenttest.NewLineServer(t)
	ping := func() {
		t.Helper()
		p := &agenttest.LinePool{Addr: line.Addr}
		defer p.Close()
		got, err := p.Ping("x")
		require.NoError(t, err)
		require.Equal(t, "x", got)
	}
	orig := snapshot()
	ping()

	undo, err := hook.Install(hook.Config{Mode: hook.Off})
	require.NoError(t, err)
	require.Equal(t, orig, snapshot(), "mode off patched something")
	undo()

	undo, err = hook.Install(hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{line.Addr}, NoGRPC: true, Random: hook.RandomAll})
	require.NoError(t, err)
	_, err = hook.Install(hook.Config{Mode: hook.Replay})
	require.ErrorIs(t, err, hook.ErrInstalled)
	now := snapshot()
	for name := range orig {
		require.NotEqual(t, orig[name], now[name], "%s not patched", name)
	}
	require.Len(t, hook.ReadStats().Patched, len(orig))
	ping()
	undo()
	undo()
	require.Equal(t, orig, snapshot())
	require.Empty(t, hook.ReadStats().Patched)
	ping()
}
