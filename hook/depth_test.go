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
)

// TestUnreportedReadAddsNoFrame checks that a read the hook has nothing to
// do with (record mode, a raw connection past its set-up, no trace) runs
// net.(*netFD).Read straight from the hook's double of net.(*conn).Read, as
// the original does: goroutines grow their stacks at the bottom of such
// reads, and each frame the agent put there would make every growth's copy
// dearer (and some goroutines grow once more).
func TestUnreportedReadAddsNoFrame(t *testing.T) {
	rec := &writeRecorder{}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	release := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
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
	}()

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
	go blockedReader(c, blocked)
	var frames []string
	require.Eventually(t, func() bool {
		frames = framesBetween("hook_test.blockedReader", "net.(*netFD).Read")
		return frames != nil
	}, 5*time.Second, 5*time.Millisecond, "no goroutine blocked in blockedReader's read")
	require.Equal(t, []string{"github.com/retrace-dev/retrace/hook.connRead"}, frames,
		"frames between the application's Read and net.(*netFD).Read")

	close(release)
	<-served
	require.Error(t, <-blocked) // the server closed the connection
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
