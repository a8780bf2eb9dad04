// Command ledger runs the example ledger service on PostgreSQL.
//
//	go run ./examples/ledger/cmd/ledger -init \
//	  -postgres 'postgres://user:pass@127.0.0.1:5432/ledger' -listen 127.0.0.1:8090
//
// With RETRACE_MODE=record the agent records every request; with
// RETRACE_MODE=replay it answers every PostgreSQL call from the mock
// server (see the retrace README).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/examples/ledger"

	// The whole integration with retrace (Stop at exit writes what it
	// recorded).
	"github.com/retrace-dev/retrace/patches"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	listen := fs.String("listen", envOr("LEDGER_LISTEN", "127.0.0.1:8090"), "listen address (env LEDGER_LISTEN)")
	url := fs.String("postgres", os.Getenv("LEDGER_POSTGRES_URL"), "PostgreSQL URL, pgx syntax (env LEDGER_POSTGRES_URL)")
	variant := fs.String("variant", os.Getenv("LEDGER_VARIANT"), "build variant: empty or changed (env LEDGER_VARIANT)")
	initDB := fs.Bool("init", false, "create the schema and the accounts before serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := ledger.NewServer(ctx, ledger.Config{PostgresURL: *url, Variant: *variant})
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintln(os.Stderr, "ledger: PostgreSQL", srv.Version)
	if *initDB {
		if err := srv.Setup(ctx); err != nil {
			return err
		}
	}
	if err := srv.Migrate(ctx); err != nil {
		return err
	}
	if err := srv.ListenAndServe(ctx, *listen, os.Stderr); err != nil {
		return err
	}
	// what the agent recorded, the start-up's background calls too, is
	// written before the process ends
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return patches.Stop(sctx)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
