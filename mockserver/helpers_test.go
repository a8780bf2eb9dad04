package mockserver_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// recordingRedis returns a go-redis client whose traffic to the real test
// server rec records.
func recordingRedis(t *testing.T, rec *mocktest.Recorder, tid string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t), Dialer: rec.Dialer("redis", tid), PoolSize: 8})
	t.Cleanup(func() { c.Close() })
	return c
}

// replayRedis returns a go-redis client talking to the mock server at mock
// on behalf of dst; the trace of each command is the caller goroutine's.
func replayRedis(t *testing.T, mock, dst string, pool int) *goredis.Client {
	t.Helper()
	d := &mocktest.Dialer{Mock: mock}
	c := goredis.NewClient(&goredis.Options{Addr: dst, Dialer: d.DialContext, PoolSize: pool, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

var netSeq atomic.Int64

// mysqlDB opens database/sql over a registered dial function, for database
// dbName (created on the real server when create is set).
func mysqlDB(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error), dbName string, pool int) *sql.DB {
	t.Helper()
	return mysqlDBAt(t, dial, "", dbName, pool)
}

// mysqlDBAt is mysqlDB with the server at addr ("" for the test server's).
func mysqlDBAt(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr, dbName string, pool int) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		cfg.Addr = addr
	}
	name := fmt.Sprintf("retrace-mock-%d", netSeq.Add(1))
	mysql.RegisterDialContext(name, func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) })
	cfg.Net = name
	cfg.DBName = dbName
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(pool)
	db.SetMaxIdleConns(pool)
	db.SetConnMaxLifetime(time.Minute)
	t.Cleanup(func() { db.Close() })
	return db
}

// scratchDB creates a database of its own on the real server, with a table
// t(id INT PRIMARY KEY, v VARCHAR) holding rows 1..n, and drops it at the
// end of the test.
func scratchDB(t *testing.T, n int) (name, addr string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	name = "retrace_mock_" + randHex(4)
	stmts := []string{
		"CREATE DATABASE " + name,
		"CREATE TABLE " + name + ".t (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL, n BIGINT NOT NULL DEFAULT 0)",
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		if _, err := db.Exec("INSERT INTO "+name+".t (id, v) VALUES (?, ?)", i, fmt.Sprintf("row-%d-%s", i, randHex(4))); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err == nil {
			db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	return name, cfg.Addr
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func report(t *testing.T, srv *mockserver.Server, tid string) mockserver.TraceReport {
	t.Helper()
	var r mockserver.TraceReport
	getJSON(t, srv.AdminURL()+"/traces/"+tid, &r)
	return r
}

// missesOf returns the calls of a report no recording answered.
func missesOf(r mockserver.TraceReport) []mockserver.ObservedCall {
	var out []mockserver.ObservedCall
	for _, c := range r.Calls {
		if c.Matched < 0 {
			out = append(out, c)
		}
	}
	return out
}
