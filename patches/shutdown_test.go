package patches

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
)

const childEnv = "PATCHES_TEST_CHILD"

// serveChild is a service that does not handle SIGTERM: it serves until
// the signal's default action ends it.
func serveChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
}

// With RETRACE_FLUSH_SIGNALS=TERM, a service that has no SIGTERM handler
// of its own loses no answered request's session to a SIGTERM, and still
// ends by the signal.
func TestFlushOnSignal(t *testing.T) {
	dir := t.TempDir()
	cmd := testenv.SelfCommand("-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=serve", "RETRACE_MODE=record", "RETRACE_RECORD="+dir,
		EnvFlushSignals+"=TERM")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	addr := strings.TrimSpace(line)

	const n, clients = 400, 4
	tr := &http.Transport{}
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	for w := range clients {
		wg.Go(func() {
			for i := w; i < n; i += clients {
				resp, err := c.Get(fmt.Sprintf("http://%s/r/%d", addr, i))
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	tr.CloseIdleConnections()
	require.NoError(t, failed)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the child ends by the signal: %v", err)
	ws := ee.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGTERM, "ended by SIGTERM as without the agent: %v", ws)

	st, err := recording.Open(context.Background(), dir)
	require.NoError(t, err)
	got := 0
	require.NoError(t, st.Scan(context.Background(), func(s *recording.Session) error {
		if strings.HasPrefix(s.RequestLine(), "GET /r/") {
			got++
		}
		return nil
	}))
	require.NoError(t, st.Close())
	assert.Equal(t, n, got, "every answered request is recorded")
}

func TestParseSignals(t *testing.T) {
	sigs, err := parseSignals(" TERM, sigint ,")
	require.NoError(t, err)
	assert.Equal(t, []os.Signal{syscall.SIGTERM, syscall.SIGINT}, sigs)
	_, err = parseSignals("KILL")
	assert.ErrorContains(t, err, `"KILL"`)
}
