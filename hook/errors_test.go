package hook_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
)

// TestErrorsAsUnhooked checks that the hooked Read and Write return the
// errors net.(*conn) returns, on every path through the hooks: io.EOF
// itself (bufio and net/http compare with ==), and *net.OpError with the
// operation, network, addresses and cause, so that errors.Is(err,
// os.ErrDeadlineExceeded), net.ErrClosed and Timeout() work as they do
// without the agent.
func TestErrorsAsUnhooked(t *testing.T) {
	without := errorScenarios(t)
	rec := &writeRecorder{}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	require.NoError(t, err)
	defer undo()
	with := errorScenarios(t)
	require.Equal(t, without, with)
}

// errorScenarios provokes each error on fresh loopback connections and
// describes it.
func errorScenarios(t *testing.T) map[string]string {
	out := map[string]string{}
	past := time.Now().Add(-time.Second)
	buf := make([]byte, 16)
	for _, side := range []string{"dialled", "dialled traced", "dialled http", "accepted"} {
		run := func(name string, f func(c net.Conn, peer net.Conn) error) {
			c, peer := pair(t, side)
			defer c.Close()
			defer peer.Close()
			var err error
			if side == "dialled traced" {
				func() {
					defer trace.Bind(&trace.Trace{ID: "rt0123456789abcdef"})()
					err = f(c, peer)
				}()
			} else {
				err = f(c, peer)
			}
			out[side+": "+name] = describe(err, c)
		}
		for _, sc := range []struct {
			name  string
			prep  func(c, peer net.Conn)
			write string // what to write; "" reads
		}{
			{"read at EOF", func(_, peer net.Conn) { peer.Close() }, ""},
			{"read past its deadline", func(c, _ net.Conn) { require.NoError(t, c.SetReadDeadline(past)) }, ""},
			{"read after close", func(c, _ net.Conn) { c.Close() }, ""},
			{"write past its deadline", func(c, _ net.Conn) { require.NoError(t, c.SetWriteDeadline(past)) }, "x"},
			{"write after close", func(c, _ net.Conn) { c.Close() }, "x"},
			// the start of a request head, which the hook holds back
			// until the head ends: the write fails all the same
			{"head write past its deadline", func(c, _ net.Conn) { require.NoError(t, c.SetWriteDeadline(past)) }, "GET "},
			{"head write after close", func(c, _ net.Conn) { c.Close() }, "GET "},
		} {
			run(sc.name, func(c, peer net.Conn) error {
				sc.prep(c, peer)
				var err error
				if sc.write == "" {
					_, err = c.Read(buf)
				} else {
					_, err = c.Write([]byte(sc.write))
				}
				return err
			})
		}
	}
	return out
}

// TestWritesReachThePeer checks that what the application writes on a
// dialled connection reaches the peer with the agent on, also when it is
// the start of something the hook's HTTP stream would follow and the
// application closes the connection right after, and that a message of
// another protocol that could pass for the start of a request line is not
// held back while the client waits for the answer.
func TestWritesReachThePeer(t *testing.T) {
	install(t, hook.Config{Mode: hook.Record, Recorder: &writeRecorder{}})
	// (Not "GET / HTTP/1.1\r\nRetr": up to 7 bytes that may start the
	// in-band Retrace-Trace-Id are held by the parser itself, in a request
	// that cannot be served anyway.)
	for _, msg := range []string{"x", "hello", "GET", "HELLO", "GET / HTTP/1.1\r\nHost: x\r\n\r\nGE",
		"GET / HTTP/1.1\r\nHost", "PING\r\n", "*1\r\n$4\r\nPING\r\n"} {
		c, peer := pair(t, "dialled")
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
		require.NoError(t, c.Close())
		got, err := io.ReadAll(peer)
		require.NoError(t, err)
		require.Equal(t, msg, string(got), "written, then closed")
		peer.Close()
	}
	for _, msg := range []string{"x", "hello", "hello world", "0000", "Ping", "HELLO", "GET", "HELLO WORLD"} {
		c, peer := pair(t, "dialled")
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
		require.NoError(t, peer.SetReadDeadline(time.Now().Add(5*time.Second)))
		got := make([]byte, len(msg))
		_, err = io.ReadFull(peer, got)
		require.NoError(t, err, "%q held back while the client waits for an answer", msg)
		require.Equal(t, msg, string(got))
		c.Close()
		peer.Close()
	}
}

// pair returns a loopback connection of the side asked for and its peer.
// "dialled http" has sent an HTTP request head first, so that its writes
// go through the hook's HTTP stream.
func pair(t *testing.T, side string) (c, peer net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		a, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- a
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	a, ok := <-accepted
	require.True(t, ok)
	if side == "accepted" {
		// an HTTP request makes the hooks follow the accepted side
		_, err := d.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		head := make([]byte, 64)
		_, err = a.Read(head)
		require.NoError(t, err)
		return a, d
	}
	if side == "dialled http" {
		_, err := d.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
	}
	return d, a
}

// describe says what err is, with c's addresses named rather than spelt.
func describe(err error, c net.Conn) string {
	if err == io.EOF {
		return "io.EOF"
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || error(oe) != err {
		return fmt.Sprintf("%T: %v", err, err)
	}
	addr := func(a net.Addr) string {
		switch {
		case a == nil:
			return "nil"
		case a.String() == c.LocalAddr().String():
			return "local"
		case a.String() == c.RemoteAddr().String():
			return "remote"
		}
		return "other " + a.String()
	}
	return fmt.Sprintf("OpError{Op:%s Net:%s Source:%s Addr:%s Err:%T(%v)} timeout=%v closed=%v deadline=%v",
		oe.Op, oe.Net, addr(oe.Source), addr(oe.Addr), oe.Err, oe.Err, oe.Timeout(),
		errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrDeadlineExceeded))
}

// TestCloseUnblocksAWrite: closing a connection while another goroutine
// is blocked writing on it (the peer reads nothing) makes that write fail
// and Close return, as without the agent; net/http does this to abort a
// request. The write goes through the hook's HTTP stream, which holds the
// connection's write lock for the whole write.
func TestCloseUnblocksAWrite(t *testing.T) {
	install(t, hook.Config{Mode: hook.Record, Recorder: &writeRecorder{}})
	c, peer := pair(t, "dialled")
	defer peer.Close()
	_, err := c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(4<<10))
	require.NoError(t, peer.(*net.TCPConn).SetReadBuffer(4<<10))
	blocked := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 64<<20))
		blocked <- err
	}()
	time.Sleep(100 * time.Millisecond) // the write fills the buffers and blocks
	requireCloseReturns(t, c, "Close blocked behind a blocked write")
	select {
	case err := <-blocked:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked write did not end at Close")
	}
}

// TestCloseDoesNotWaitForRoom: Close with the start of a request head held
// back, the socket's buffer full and the peer reading nothing, returns at
// once, as without the agent (the held bytes are dropped).
func TestCloseDoesNotWaitForRoom(t *testing.T) {
	install(t, hook.Config{Mode: hook.Record, Recorder: &writeRecorder{}})
	c, peer := pair(t, "dialled")
	defer peer.Close()
	require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(4<<10))
	require.NoError(t, peer.(*net.TCPConn).SetReadBuffer(4<<10))
	body := make([]byte, 16<<20)
	_, err := c.Write([]byte(fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))))
	require.NoError(t, err)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = c.Write(body) // fills the buffers, then times out
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost")) // held back: a head in progress
	require.NoError(t, err)
	requireCloseReturns(t, c, "Close waited for room in the socket's buffer")
}

// requireCloseReturns closes c and fails with msg unless Close returns
// (without error) within seconds.
func requireCloseReturns(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}
