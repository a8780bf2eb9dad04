package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// SIGTERM right after N requests to the real service binary, recording:
// every request's session is in the store (the service calls patches.Stop
// after its graceful shutdown).
func TestSIGTERMLosesNoSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service")
	}
	redisAddr := testenv.RedisAddr(t)
	dsn := testenv.MySQLDSN(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "orders")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	rec := filepath.Join(dir, "rec")
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-redis", redisAddr, "-mysql", dsn,
		"-pricing", "http://127.0.0.1:1", "-redis-prefix", "retrace-sigterm-test:")
	cmd.Env = append(os.Environ(), "RETRACE_MODE=record", "RETRACE_RECORD="+rec, "RETRACE_APP=orders")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(stderr)
	var addr string
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), orders.ListeningPrefix); ok {
			addr = a
			break
		}
	}
	require.NotEmpty(t, addr, "the service listens")
	logged := make(chan string)
	go func() {
		b, _ := io.ReadAll(stderr)
		logged <- string(b)
	}()

	const n, clients = 1000, 8
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range clients {
		wg.Go(func() {
			for i := w; i < n; i += clients {
				resp, err := c.Get(fmt.Sprintf("http://%s/stock/sku-%d", addr, i))
				if err != nil {
					errs <- err
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// right after the last response
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	t.Log(<-logged)

	st, err := recording.Open(context.Background(), rec)
	require.NoError(t, err)
	defer st.Close()
	ids := map[string]bool{}
	require.NoError(t, st.Scan(context.Background(), func(s *recording.Session) error {
		if strings.HasPrefix(s.RequestLine(), "GET /stock/sku-") {
			ids[s.ID] = true
		}
		return nil
	}))
	assert.Equal(t, n, len(ids), "every answered request is recorded")
}
