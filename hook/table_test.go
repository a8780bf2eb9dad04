package hook

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/trace"
)

func TestPadding(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  reflect.Type
		want uintptr
	}{
		{"bools after a word", reflect.TypeFor[struct {
			a       uint64
			b, c, d bool
		}](), 12},
		{"no gap", reflect.TypeFor[struct{ a, b uint32 }](), 0},
		{"gap too short", reflect.TypeFor[struct {
			a       uint32
			b, c, d bool
		}](), 0},
		{"gap inside a nested struct", reflect.TypeFor[struct {
			a uint64
			n struct {
				x uint64
				y bool
				z uint64
			}
		}](), 20},
		{"arrays cover their elements", reflect.TypeFor[struct {
			a [2]struct {
				x uint64
				y byte
			}
			b uint64
		}](), 12},
		{"byte array", reflect.TypeFor[struct {
			a [12]byte
			b uint64
		}](), 12},
		{"first word never used", reflect.TypeFor[struct {
			a bool
			b uint64
		}](), 4},
	} {
		if got := padding(c.typ, 0); got != c.want {
			t.Errorf("%s: padding(%v, 0) = %d, want %d", c.name, c.typ, got, c.want)
		}
	}
	twoGaps := reflect.TypeFor[struct {
		a uint64
		b bool
		c uint64
		d bool
	}]()
	require.EqualValues(t, 12, padding(twoGaps, 0))
	require.EqualValues(t, 28, padding(twoGaps, 13), "the first gap at or after from")
	require.EqualValues(t, 28, padding(twoGaps, 28))
	require.Zero(t, padding(twoGaps, 29))

	l, err := layout()
	require.NoError(t, err)
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		// netFD of Go 1.21 to 1.26: after poll.FD, seven bytes follow
		// isConnected; the index goes there, out of poll.FD
		pfd, _ := reflect.TypeFor[net.TCPConn]().Field(0).Type.Field(0).Type.Elem().FieldByName("pfd")
		require.NotZero(t, l.tag, "net.netFD has padding on %s", runtime.GOARCH)
		require.GreaterOrEqual(t, l.tag, pfd.Offset+pfd.Type.Size(), "the index is kept out of poll.FD")
	}
	t.Logf("index kept at net.netFD+%d", l.tag)
}

// installRecord installs record mode with rec (nopRecorder when nil).
func installRecord(t *testing.T, rec Recorder) *engine {
	t.Helper()
	if rec == nil {
		rec = nopRecorder{}
	}
	undo, err := Install(Config{Mode: Record, Recorder: rec, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(undo)
	return active.Load()
}

// fdOf is the *net.netFD of a TCP connection.
func fdOf(c net.Conn) unsafe.Pointer {
	return (*netConn)(unsafe.Pointer(c.(*net.TCPConn))).fd
}

// serveTCP listens on loopback and runs handle on every connection, each
// on a goroutine of its own; it stops with the test.
func serveTCP(t *testing.T, handle func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { handle(c) })
		}
	})
	return ln.Addr().String()
}

// echoServer answers every connection with what it reads.
func echoServer(t *testing.T) string {
	return serveTCP(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
}

// TestDenseIndexFollowsConnections: a connection's netFD leads to its
// entry, a closed one's to none, and a released index serves the next
// connection, which the closed one's netFD (still held) does not reach.
func TestDenseIndexFollowsConnections(t *testing.T) {
	e := installRecord(t, nil)
	if e.conns.tag == 0 {
		t.Skip("net.netFD has no padding here")
	}
	addr := echoServer(t)
	dial := func() (net.Conn, unsafe.Pointer) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = c.Write([]byte("x"))
		require.NoError(t, err)
		return c, fdOf(c)
	}
	a, fa := dial()
	ent, w := e.conns.entry(fa)
	require.NotNil(t, ent)
	require.Equal(t, uintptr(fa), w)
	st := e.state(fa, ent)
	require.NotNil(t, st)
	require.Equal(t, uintptr(fa), st.key)
	idx := e.conns.index(fa)
	require.Equal(t, st.idx, idx)

	require.NoError(t, a.Close())
	ent, _ = e.conns.entry(fa)
	require.Nil(t, ent, "a closed connection's netFD leads to no entry")
	require.True(t, st.gone.Load())

	b, fb := dial()
	defer b.Close()
	require.Equal(t, idx, e.conns.index(fb), "the released index is handed out again")
	ent, _ = e.conns.entry(fa)
	require.Nil(t, ent, "the closed connection's index now names another netFD")
	ent, _ = e.conns.entry(fb)
	require.NotNil(t, ent)
	require.Equal(t, uintptr(fb), e.state(fb, ent).key)
}

// countRecorder counts the outbound bytes reported with each trace.
type countRecorder struct {
	nopRecorder
	mu     sync.Mutex
	writes map[string]int
	reads  map[string]int // by the reading goroutine's trace
}

func (r *countRecorder) OutboundWrite(_ *ConnInfo, tid string, p []byte) {
	r.mu.Lock()
	r.writes[tid]++
	r.mu.Unlock()
}

func (r *countRecorder) OutboundRead(_ *ConnInfo, p []byte) {
	r.mu.Lock()
	r.reads[trace.CurrentID()]++
	r.mu.Unlock()
}

// TestQuietConnection: a dialled connection that carries no HTTP has its
// first write (which shows it is not HTTP) and the next setupUntraced
// untraced writes (and their answers) reported, is marked quiet with the
// write that goes past them, and from then on its
// untraced writes and reads are not reported while traced ones are. With
// no dense index the same is reported, without the mark.
func TestQuietConnection(t *testing.T) {
	for _, dense := range []bool{true, false} {
		t.Run(map[bool]string{true: "dense", false: "map"}[dense], func(t *testing.T) {
			if !dense {
				NoDenseIndex(t)
			}
			rec := &countRecorder{writes: map[string]int{}, reads: map[string]int{}}
			e := installRecord(t, rec)
			c, err := net.Dial("tcp", echoServer(t))
			require.NoError(t, err)
			defer c.Close()
			fd := fdOf(c)
			ping := func(msg string) {
				_, err := c.Write([]byte(msg))
				require.NoError(t, err)
				buf := make([]byte, len(msg))
				_, err = io.ReadFull(c, buf)
				require.NoError(t, err)
				require.True(t, bytes.Equal(buf, []byte(msg)))
			}
			quiet := func() bool {
				_, w := e.conns.entry(fd)
				return w&quietBit != 0
			}
			for i := range setupUntraced + 5 {
				ping("untraced\n")
				require.Equal(t, dense && i > setupUntraced, quiet(), "after %d untraced writes", i+1)
			}
			id := trace.NewID()
			release := trace.Bind(&trace.Trace{ID: id})
			ping("traced\n")
			release()
			ping("untraced again\n")

			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Equal(t, 1+setupUntraced, rec.writes[""], "untraced writes reported")
			require.Equal(t, 1, rec.writes[id])
			require.Positive(t, rec.reads[id], "the traced write's answer is reported")
			require.LessOrEqual(t, rec.reads[""], 2*setupUntraced, "untraced reads reported")
		})
	}
}
