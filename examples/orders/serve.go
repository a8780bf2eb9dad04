package orders

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ListeningPrefix starts the line ListenAndServe writes once it accepts
// connections; the address follows it. Tests and the demo read it to find a
// service started on port 0.
const ListeningPrefix = "orders: listening on "

// ListenAndServe serves s on addr until ctx ends, then shuts down gracefully
// (waiting up to 10s for requests in flight). It writes ListeningPrefix and
// the bound address to log once it listens.
func (s *Server) ListenAndServe(ctx context.Context, addr string, log io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("orders: listen on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Fprintf(log, "%s%s\n", ListeningPrefix, ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	<-errc
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
