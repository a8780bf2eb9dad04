package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/retrace-dev/retrace/internal/demo"
)

func init() {
	commands["demo"] = command{summary: "the whole story on embedded parts: record, replay with downstreams gone, catch a change, load-replay", run: runDemo}
}

func runDemo(ctx context.Context, p *proc, args []string) error {
	if p.Getenv(demo.ChildEnv) == "1" {
		// The demo started this process as its orders service.
		return demo.ServeChild(ctx, p.Getenv, p.Stderr)
	}
	if len(args) > 0 {
		switch args[0] {
		case "downstreams":
			return runDemoDownstreams(ctx, p, args[1:])
		case "traffic":
			return runDemoTraffic(ctx, p, args[1:])
		}
	}
	fs := newFlagSet(p, "demo", "[--dir DIR] [--requests N] [--clients C] | demo downstreams … | demo traffic …",
		"retrace demo --requests 500 --clients 32")
	dir := fs.String("dir", "", "work directory for recordings, reports and load results (default: a new temporary directory, kept)")
	requests := fs.Int("requests", 300, "requests recorded")
	clients := fs.Int("clients", 16, "concurrent clients while recording, and sessions replayed at once")
	spread := fs.Duration("spread", 4*time.Second, "how long the recorded traffic lasts")
	speed := fs.Float64("speed", 2, "load replay: times the recorded pace")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q (subcommands: downstreams, traffic)", fs.Arg(0))
	}
	if *requests <= 0 || *clients <= 0 || *speed <= 0 || *spread < 0 {
		return usageError("--requests, --clients and --speed must be positive, --spread not negative")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the service: %w", err)
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "retrace-demo-"); err != nil {
			return err
		}
	}
	res, err := demo.Run(ctx, demo.Options{Dir: *dir, Exe: exe, ExeArgs: []string{"demo"}, Requests: *requests, Clients: *clients,
		Spread: *spread, Speed: *speed, Out: p.Stdout})
	if err != nil {
		return err
	}
	if err := res.Verdict(); err != nil {
		return failed("%v", err)
	}
	fmt.Fprintln(p.Stdout, "\ndemo passed: the recorded build replayed 100% clean with every downstream gone, the changed build was caught, the load replay sent every recorded request")
	return nil
}

// runDemoDownstreams runs the embedded downstreams of the orders example,
// seeded, until interrupted: for the step-by-step walkthrough.
func runDemoDownstreams(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "demo downstreams", "[--mysql ADDR] [--redis ADDR] [--pricing ADDR] [--fraud ADDR] [--ca FILE]",
		"retrace demo downstreams --mysql 127.0.0.1:13306 --redis 127.0.0.1:16379 --pricing 127.0.0.1:18081 --fraud 127.0.0.1:18082 --ca ./pricing-ca.pem")
	var a demo.DownstreamAddrs
	fs.StringVar(&a.MySQL, "mysql", "127.0.0.1:3306", "address of the in-memory MySQL server (user root, no password, database orders)")
	fs.StringVar(&a.Redis, "redis", "127.0.0.1:6379", "address of the in-memory Redis")
	fs.StringVar(&a.Pricing, "pricing", "127.0.0.1:8081", "address of the pricing service (HTTPS, with a certificate made at start)")
	fs.StringVar(&a.Fraud, "fraud", "127.0.0.1:8082", "address of the fraud-check service (gRPC, plaintext HTTP/2)")
	fs.StringVar(&a.CAFile, "ca", "", "write the certificate of the CA that signed the pricing service's certificate here (for ORDERS_PRICING_CA); default: a temporary file, printed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	defer demo.QuietDependencies()()
	dn, err := demo.StartDownstreams(ctx, a)
	if err != nil {
		return err
	}
	defer dn.Close()
	fmt.Fprintf(p.Stdout, "MySQL   %s   (DSN %s)\nRedis   %s\npricing %s   (CA %s)\nfraud   %s   (gRPC)\nseeded; Ctrl-C stops them\n",
		dn.MySQL.Addr(), dn.MySQL.DSN(), dn.RedisAddr(), dn.PricingURL(), dn.OrdersConfig().PricingCA, dn.FraudAddr())
	<-ctx.Done()
	return nil
}

// runDemoTraffic sends the demo's traffic to an orders service.
func runDemoTraffic(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "demo traffic", "--target URL [--requests N] [--clients C] [--spread D]",
		"retrace demo traffic --target http://127.0.0.1:8080 --requests 200 --clients 8")
	target := fs.String("target", "", "base URL of the orders service (required)")
	requests := fs.Int("requests", 200, "requests to send")
	clients := fs.Int("clients", 8, "concurrent clients")
	spread := fs.Duration("spread", 0, "spread the requests over this long (0: as fast as answered)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *target == "" {
		return usageError("--target is required")
	}
	if *requests <= 0 || *clients <= 0 {
		return usageError("--requests and --clients must be positive")
	}
	st, err := demo.Traffic{BaseURL: *target, Requests: *requests, Clients: *clients, Duration: *spread}.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(p.Stdout, "%d requests in %.1fs:", st.Requests, st.Elapsed.Seconds())
	for _, api := range st.APIs() {
		fmt.Fprintf(p.Stdout, " %s ×%d;", api, st.ByAPI[api])
	}
	fmt.Fprintf(p.Stdout, " statuses %v, %d transport errors\n", st.ByStatus, st.Errors)
	if st.Errors > 0 {
		return failed("%d of %d requests got no answer", st.Errors, st.Requests)
	}
	return nil
}
