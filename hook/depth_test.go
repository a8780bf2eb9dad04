package hook_test

import (
	"bufio"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
)

// TestReadAddsNoFrame checks that a read on a dialled connection runs
// net.(*netFD).Read straight from the hook's double of net.(*conn).Read, as
// the original does, whether the hook reports it (a traced read in record
// mode) or not (a raw connection past its set-up, no trace): goroutines grow
// their stacks at the bottom of such reads, and each frame the agent put
// there would make every growth's copy dearer (and some goroutines grow
// once more).
func TestReadAddsNoFrame(t *testing.T) {
	t.Run("unreported", func(t *testing.T) { testReadFrames(t, false) })
	t.Run("reported", func(t *testing.T) { testReadFrames(t, true) })
}

// TestWriteAddsNoFrame is TestReadAddsNoFrame for a write (a traced one,
// reported before it goes out) that blocks because the server reads
// nothing.
func TestWriteAddsNoFrame(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	rec := &writeRecorder{dst: ln.Addr().String()}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec})
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	sc := <-accepted
	require.NotNil(t, sc)
	require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(4<<10))
	require.NoError(t, sc.(*net.TCPConn).SetReadBuffer(4<<10))

	_, err = c.Write([]byte("ping\n")) // the connection is seen to carry no HTTP
	require.NoError(t, err)
	big := make([]byte, 64<<20) // more than loopback buffers hold
	blocked := make(chan error, 1)
	go func() {
		defer trace.Bind(&trace.Trace{ID: "rt0123456789abcdef"})()
		blockedWriter(c, big, blocked)
	}()
	frames := awaitFramesBetween(t, "hook_test.blockedWriter", "net.(*netFD).Write")
	require.Equal(t, []string{"github.com/retrace-dev/retrace/hook.connWrite"}, frames,
		"frames between the application's Write and net.(*netFD).Write")

	sc.Close() // the write fails
	require.Error(t, <-blocked)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.writes, 1)
	for _, ws := range rec.writes {
		require.Equal(t, "rt0123456789abcdef", ws[len(ws)-1].tid, "the traced write must be reported")
	}
}

// blockedWriter writes b on c (the caller's stack dump finds it by name).
//
//go:noinline
func blockedWriter(c net.Conn, b []byte, done chan<- error) {
	_, err := c.Write(b)
	done <- err
}

func testReadFrames(t *testing.T, traced bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	rec := &writeRecorder{dst: ln.Addr().String()}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec})

	release := make(chan struct{})
	served := serveOne(ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; i < 20; i++ { // answer 20 lines, then hold the 21st
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
			if _, err := c.Write([]byte("ok\n")); err != nil {
				return
			}
		}
		<-release
		_, _ = c.Write([]byte("bye\n"))
	})

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 20; i++ { // past the connection's set-up
		_, err := c.Write([]byte("ping\n"))
		require.NoError(t, err)
		_, err = br.ReadString('\n')
		require.NoError(t, err)
	}

	blocked := make(chan error, 1)
	go func() {
		if traced {
			defer trace.Bind(&trace.Trace{ID: "rt0123456789abcdef"})()
		}
		blockedReader(c, blocked)
	}()
	frames := awaitFramesBetween(t, "hook_test.blockedReader", "net.(*netFD).Read")
	require.Equal(t, []string{"github.com/retrace-dev/retrace/hook.connRead"}, frames,
		"frames between the application's Read and net.(*netFD).Read")

	close(release)
	<-served
	require.NoError(t, <-blocked)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.reads, 1)
	for _, tids := range rec.reads {
		last := tids[len(tids)-1]
		if traced {
			require.Equal(t, "rt0123456789abcdef", last, "the traced read must be reported")
		} else {
			require.Empty(t, last, "the last read reported is one of the set-up's")
		}
	}
}

// blockedReader reads c until the read fails (the caller's stack dump finds
// it by name).
//
//go:noinline
func blockedReader(c net.Conn, done chan<- error) {
	_, err := c.Read(make([]byte, 64))
	done <- err
}

// framesBetween finds a goroutine whose stack has the function inner called
// (through other frames) from outer, and returns the function names in
// between, nearest inner first; nil when no goroutine has both.
func framesBetween(outer, inner string) []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		var funcs []string
		for _, line := range strings.Split(g, "\n")[1:] {
			if line == "" || strings.HasPrefix(line, "\t") {
				continue
			}
			if i := strings.LastIndex(line, "("); i > 0 {
				line = line[:i] // drop the arguments
			}
			funcs = append(funcs, line)
		}
		in, out := -1, -1
		for i, f := range funcs {
			if f == inner && in < 0 {
				in = i
			}
			if strings.HasSuffix(f, outer) {
				out = i
			}
		}
		if in >= 0 && out > in {
			return append([]string{}, funcs[in+1:out]...)
		}
	}
	return nil
}

// awaitFramesBetween waits until a goroutine is blocked in inner called from
// outer and returns framesBetween's answer.
func awaitFramesBetween(t *testing.T, outer, inner string) []string {
	t.Helper()
	var frames []string
	require.Eventually(t, func() bool {
		frames = framesBetween(outer, inner)
		return frames != nil
	}, 5*time.Second, 5*time.Millisecond, "no goroutine blocked in %s under %s", inner, outer)
	return frames
}
