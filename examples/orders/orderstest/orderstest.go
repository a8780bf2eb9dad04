// Package orderstest gives tests a fresh, isolated environment for the orders
// example against the real servers of internal/testenv: a MySQL database of
// their own, a Redis key prefix of their own and in-process pricing and
// fraud-check services.
package orderstest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/examples/pricing"
	"github.com/retrace-dev/retrace/internal/testenv"
)

// Database creates a database of its own on the test MariaDB, drops it when
// the test ends and returns its DSN.
func Database(t testing.TB) string {
	t.Helper()
	base := testenv.MySQLDSN(t)
	mc, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("orderstest: %s: %v", testenv.MySQLEnv, err)
	}
	name := "orders_" + Token()
	admin := mc.Clone()
	admin.DBName = ""
	conn, err := mysql.NewConnector(admin)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("orderstest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		conn, _ := mysql.NewConnector(admin)
		db := sql.OpenDB(conn)
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("orderstest: drop database %s: %v", name, err)
		}
	})
	mine := mc.Clone()
	mine.DBName = name
	mine.ParseTime = true
	return mine.FormatDSN()
}

// RedisPrefix returns a key prefix of its own on the test redis-server and
// deletes its keys when the test ends.
func RedisPrefix(t testing.TB) (addr, prefix string) {
	t.Helper()
	addr = testenv.RedisAddr(t)
	prefix = "orderstest:" + Token() + ":"
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	return addr, prefix
}

// Pricing starts the pricing service on a loopback port; wrap, when not nil,
// wraps its handler (to observe requests). It stops when the test ends.
func Pricing(t testing.TB, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	h := pricing.NewHandler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// Fraud starts the fraud-check service (gRPC) on a loopback port with
// opts (interceptors to observe calls) and returns its address. It stops
// when the test ends.
func Fraud(t testing.TB, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fraud.NewGRPCServer(opts...)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("orderstest: fraud service: %v", err)
		}
	})
	return ln.Addr().String()
}

// Config returns an orders configuration over a fresh database, a fresh
// Redis prefix and the given pricing URL, with the schema created and the
// seed data loaded.
func Config(t testing.TB, pricingURL string) orders.Config {
	t.Helper()
	addr, prefix := RedisPrefix(t)
	cfg := orders.Config{MySQLDSN: Database(t), RedisAddr: addr, RedisPrefix: prefix, PricingURL: pricingURL}
	srv, err := orders.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Token returns 12 random hex digits for names of test resources.
func Token() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
