// Command benchserver serves agenttest.Service (one line-protocol call per
// request, from a goroutine the handler starts) with the retrace agent
// configured from the environment, for scripts/bench-agent.sh.
//
//	RETRACE_MODE=replay RETRACE_MOCK_ADDR=127.0.0.1:3515 benchserver -line 127.0.0.1:7000 -ready addr.txt
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/patches"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	line := flag.String("line", "", "line-protocol downstream (host:port)")
	ready := flag.String("ready", "", "file to write the served address to once listening")
	lineCA := flag.String("line-ca", "", "speak TLS to the line downstream, trusting the CA in this PEM file")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchserver:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*listen, *line, *ready, *lineCA); err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(1)
	}
}

func run(listen, line, ready, lineCA string) error {
	if err := patches.Err(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if line == "" {
		return fmt.Errorf("-line is required")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	pool := &agenttest.LinePool{Addr: line}
	if lineCA != "" {
		pem, err := os.ReadFile(lineCA)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-line-ca %s: no certificate", lineCA)
		}
		pool.TLS = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	}
	defer pool.Close()
	srv := &http.Server{Handler: &agenttest.Service{Line: pool}}
	if ready != "" {
		if err := os.WriteFile(ready, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return patches.Stop(context.Background())
}
