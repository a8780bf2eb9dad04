package hook_test

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
)

// rawListener records the bytes of each connection it accepts, until the
// client closes.
func rawListener(t *testing.T, network, addr string) (string, <-chan []byte) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	got := make(chan []byte, 4)
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(c)
			c.Close()
			got <- b
		}
	}()
	return ln.Addr().String(), got
}

func send(t *testing.T, addr, tid, payload string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	release := trace.Bind(&trace.Trace{ID: tid})
	n, err := c.Write([]byte(payload))
	release()
	require.NoError(t, err)
	require.Equal(t, len(payload), n, "Write must return the application's count")
	require.NoError(t, c.Close())
}

// TestRedirectRules: a connect to a pass-through destination or to the mock
// itself goes where it was meant to, unframed; any other goes to the mock,
// preamble first, every write framed with its trace — also from an IPv6
// socket to an IPv4 mock.
func TestRedirectRules(t *testing.T) {
	mock, atMock := rawListener(t, "tcp", "127.0.0.1:0")
	pass, atPass := rawListener(t, "tcp", "127.0.0.1:0")
	other, _ := rawListener(t, "tcp", "127.0.0.1:0")
	before := hook.ReadStats()
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mock, Passthrough: []string{pass}, Logger: discardLogger()})

	send(t, pass, "rtpass", "to the pass-through\n")
	require.Equal(t, "to the pass-through\n", string(<-atPass))

	send(t, mock, "rtmock", "to the mock itself\n")
	require.Equal(t, "to the mock itself\n", string(<-atMock))

	send(t, other, "rtother", "redirected\n")
	want := string(trace.AppendFrameHeader(nil, "rtother", other, 0)) +
		string(trace.AppendFrame(nil, "rtother", other, []byte("redirected\n")))
	require.Equal(t, want, string(<-atMock))
	require.Equal(t, int64(1), hook.ReadStats().RedirectedConnects-before.RedirectedConnects)

	// An IPv6 destination reaches the IPv4 mock through a v4-mapped address.
	v6, _ := rawListener(t, "tcp6", "[::1]:0")
	send(t, v6, "rtv6", "from ipv6\n")
	want = string(trace.AppendFrameHeader(nil, "rtv6", v6, 0)) +
		string(trace.AppendFrame(nil, "rtv6", v6, []byte("from ipv6\n")))
	require.Equal(t, want, string(<-atMock))
}

// TestFirstReadRacesClose: a connection's first Read (which looks up where
// it was redirected) and a Close on another goroutine, as net/http's
// readLoop and an idle-pool close do; run with -race.
func TestFirstReadRacesClose(t *testing.T) {
	mock, other := benchServer(t, false), benchServer(t, false)
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mock, Logger: discardLogger()})
	for range 200 {
		c, err := net.Dial("tcp", other)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.Read(make([]byte, 1))
		}()
		require.NoError(t, c.Close())
		<-done
	}
}
