package hook_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
)

// TestConcurrentWritersAndClose: net.Conn may be written by several
// goroutines at once (each Write goes out whole) while another reads and
// another closes it. With the agent in record mode, and in replay mode
// (the connections redirected and framed), on connections that carry HTTP
// heads, heads cut in the middle, RESP and other bytes, none of that may
// race (run with -race), deadlock or make the hooks panic.
func TestConcurrentWritersAndClose(t *testing.T) {
	for _, mode := range []hook.Mode{hook.Record, hook.Replay} {
		t.Run(mode.String(), func(t *testing.T) {
			dst := sink(t)
			var logs logBuffer
			cfg := hook.Config{Mode: mode, Recorder: &writeRecorder{}, Logger: logs.logger()}
			if mode == hook.Replay {
				cfg.MockAddr, dst = dst, "127.0.0.1:9" // redirected to the sink
			}
			install(t, cfg)
			concurrentWritersAndClose(t, dst)
			require.NotContains(t, logs.String(), "hook panicked", "the hooks recovered from a panic")
		})
	}
}

func concurrentWritersAndClose(t *testing.T, dst string) {
	msgs := []string{
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"GET /a HTTP/1.1\r\nHo",
		"*1\r\n$4\r\nPING\r\n",
		"hello",
	}
	var wg sync.WaitGroup
	for i := range 200 {
		c, err := net.Dial("tcp", dst)
		require.NoError(t, err)
		for w := range 3 {
			wg.Go(func() {
				defer trace.Bind(&trace.Trace{ID: fmt.Sprintf("rt%016d", w)})()
				for k := range 20 {
					if _, err := c.Write([]byte(msgs[(i+w+k)%len(msgs)])); err != nil {
						return
					}
				}
			})
		}
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, _ = c.Read(make([]byte, 10))
		})
		wg.Go(func() {
			time.Sleep(time.Duration(i%5) * time.Millisecond)
			c.Close()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("reads, writes and closes did not all end")
	}
}

// sink listens on loopback and reads every connection to its end; it
// stops with the test.
func sink(t *testing.T) string {
	return hook.ServeTCP(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	})
}
