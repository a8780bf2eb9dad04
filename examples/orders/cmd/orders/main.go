// Command orders runs the example order service.
//
//	go run ./examples/orders/cmd/orders -init \
//	  -mysql 'root@tcp(127.0.0.1:3306)/orders' -redis 127.0.0.1:6379 \
//	  -pricing http://127.0.0.1:8081 -fraud 127.0.0.1:8082 -listen 127.0.0.1:8080
//
// With RETRACE_MODE=record the agent records every request; with
// RETRACE_MODE=replay it answers every downstream call from the mock server
// (see the retrace README).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/examples/orders"

	// The whole integration with retrace: RETRACE_MODE and friends decide
	// at start whether and how the agent records or replays this service;
	// patches.Stop at shutdown writes the sessions it still holds.
	"github.com/retrace-dev/retrace/patches"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	env := orders.ConfigFromEnv()
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	listen := fs.String("listen", envOr("ORDERS_LISTEN", "127.0.0.1:8080"), "listen address (env ORDERS_LISTEN)")
	dsn := fs.String("mysql", env.MySQLDSN, "MySQL DSN, go-sql-driver syntax (env "+orders.EnvMySQLDSN+")")
	redisAddr := fs.String("redis", env.RedisAddr, "Redis host:port (env "+orders.EnvRedisAddr+")")
	prefix := fs.String("redis-prefix", env.RedisPrefix, "prefix of every Redis key, default orders: (env "+orders.EnvRedisPrefix+")")
	pricingURL := fs.String("pricing", env.PricingURL, "base URL of the pricing service (env "+orders.EnvPricingURL+")")
	pricingCA := fs.String("pricing-ca", env.PricingCA, "PEM file of the CA of an https pricing URL, default the system's roots (env "+orders.EnvPricingCA+")")
	fraudAddr := fs.String("fraud", env.FraudAddr, "host:port of the fraud-check service (gRPC), default none: no fraud check (env "+orders.EnvFraudAddr+")")
	variant := fs.String("variant", env.Variant, "build variant: empty or changed (env "+orders.EnvVariant+")")
	initDB := fs.Bool("init", false, "create the schema and seed the data before serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := env // ORDERS_TIMEOUT and ORDERS_MYSQL_MAX_CONNS have no flag
	cfg.MySQLDSN, cfg.RedisAddr, cfg.RedisPrefix = *dsn, *redisAddr, *prefix
	cfg.PricingURL, cfg.PricingCA, cfg.FraudAddr, cfg.Variant = *pricingURL, *pricingCA, *fraudAddr, *variant
	srv, err := orders.NewServer(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *initDB {
		if err := srv.Setup(ctx); err != nil {
			return err
		}
	}
	err = srv.ListenAndServe(ctx, *listen, os.Stderr)
	// The service handles SIGTERM itself (graceful shutdown above), so it
	// calls the agent's shutdown hook: every session of a request it
	// answered is written before the process ends.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := patches.Stop(sctx); serr != nil {
		fmt.Fprintln(os.Stderr, "orders: retrace:", serr)
	}
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
