package capture_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// serveDB serves h on a loopback port until the test ends, then closes db,
// and returns the server's address.
func serveDB(t *testing.T, h http.Handler, db *sql.DB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-served
		db.Close()
	})
	return ln.Addr().String()
}

// lookupUsers sends rounds requests "/user?id=ID" from each of clients
// concurrent clients, each with a unique id, and fails the test unless
// every answer is "ID 0".
func lookupUsers(t *testing.T, addr string, clients, rounds int) {
	t.Helper()
	c := newClient(clients)
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, clients*rounds)
	for range clients {
		wg.Go(func() {
			for range rounds {
				id := newReqID()
				resp, err := c.Get("http://" + addr + "/user?id=" + id)
				if err != nil {
					errs <- err
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != id+" 0" {
					errs <- fmt.Errorf("request %s: %d %s", id, resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
