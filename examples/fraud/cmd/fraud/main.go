// Command fraud runs the example fraud-check service (gRPC, plaintext
// HTTP/2).
//
//	go run ./examples/fraud/cmd/fraud -listen 127.0.0.1:8082
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/retrace-dev/retrace/examples/fraud"
)

func main() {
	listen := flag.String("listen", envOr("FRAUD_LISTEN", "127.0.0.1:8082"), "listen address (env FRAUD_LISTEN)")
	flag.Parse()
	if err := serve(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "fraud:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := fraud.NewGRPCServer()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "fraud: listening on %s\n", ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.GracefulStop()
	return <-errc
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
