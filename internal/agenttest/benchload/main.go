// Command benchload is the load side of scripts/bench-agent.sh.
//
//	benchload downstream -ready FILE   runs the line-protocol server and a
//	                                   frame-checking mock; writes "LINE MOCK"
//	                                   to FILE; on SIGTERM prints what the
//	                                   mock saw
//	benchload load -target ADDR -duration 5s -conns 16
//	                                   sends GET /work/<id> with a fresh
//	                                   Retrace-Trace-Id per request on keep-alive
//	                                   connections and prints "ok N errors E rps R"
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/certtest"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchload downstream|load [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "downstream":
		err = downstream(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchload:", err)
		os.Exit(1)
	}
}

func downstream(args []string) error {
	fs := flag.NewFlagSet("downstream", flag.ExitOnError)
	ready := fs.String("ready", "", "file to write \"LINE MOCK\" addresses to")
	tlsDir := fs.String("tls", "", "serve the line protocol over TLS, the CA's certificate written to DIR/ca.pem")
	_ = fs.Parse(args)
	var cfg *tls.Config
	if *tlsDir != "" {
		ca, err := certtest.NewCA()
		if err != nil {
			return err
		}
		cert, err := ca.Leaf("127.0.0.1")
		if err != nil {
			return err
		}
		if _, err := ca.WritePEM(*tlsDir); err != nil {
			return err
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	line, err := agenttest.StartLineServerTLS("", cfg)
	if err != nil {
		return err
	}
	defer line.Close()
	mock, err := agenttest.StartMock("", map[string]agenttest.Proto{line.Addr: agenttest.ProtoLine})
	if err != nil {
		return err
	}
	defer mock.Close()
	if err := os.WriteFile(*ready, []byte(line.Addr+" "+mock.Addr), 0o644); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	st := mock.Stats()
	fmt.Printf("mock: %d connections, %d frames, %d naming a trace, %d misattributed, %d errors\n",
		st.Conns, st.Frames, st.Tagged, len(st.Misattributed), len(st.Errors))
	for _, m := range append(st.Misattributed, st.Errors...) {
		fmt.Println("  ", m)
	}
	if len(st.Misattributed) > 0 {
		return errors.New("frames were charged to the wrong trace")
	}
	return nil
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("target", "", "service address host:port")
	duration := fs.Duration("duration", 5*time.Second, "how long to send (at most 10s)")
	conns := fs.Int("conns", 16, "keep-alive connections, one sender each")
	_ = fs.Parse(args)
	if *duration > 10*time.Second {
		return fmt.Errorf("-duration %v exceeds 10s", *duration)
	}
	var ok, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	deadline := time.Now().Add(*duration)
	start := time.Now()
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := agenttest.DialRaw(*target)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			defer rc.Close()
			for time.Now().Before(deadline) {
				id := agenttest.NewID()
				code, body, err := rc.Get("/work/"+id, "Retrace-Trace-Id: "+id)
				if err == nil {
					err = check(id, code, body)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	fmt.Printf("ok %d errors %d rps %.1f\n", ok.Load(), failed.Load(), float64(ok.Load())/elapsed.Seconds())
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

func check(id string, code int, body []byte) error {
	var res agenttest.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("status %d body %q: %w", code, body, err)
	}
	if code != 200 || res.Line != id {
		return fmt.Errorf("status %d, line answer %q for %s, errors %v", code, res.Line, id, res.Errors)
	}
	return nil
}
