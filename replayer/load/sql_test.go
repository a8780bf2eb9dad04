package load

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/retrace-dev/retrace/internal/testenv"
)

// scratchDB creates a database of its own on the test MariaDB and returns
// the DSN of it; it is dropped at the end of the test.
func scratchDB(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("retrace_load_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err == nil {
			_, _ = db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

func TestSQLExecutorAgainstMariaDB(t *testing.T) {
	dsn := scratchDB(t)
	exec, err := NewExecutor("mysql://"+dsn, ExecutorConfig{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	db := exec.(*SQLExecutor).DB()
	if _, err := db.Exec("CREATE TABLE orders (id INT PRIMARY KEY, item VARCHAR(32))"); err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1700000000, 0)
	var reqs []Request
	for i := range 20 {
		reqs = append(reqs, Request{At: base.Add(time.Duration(i) * time.Millisecond), API: "insert",
			Query: "INSERT INTO orders (id, item) VALUES (?, ?)", Args: []any{float64(i), fmt.Sprint("item", i)}})
	}
	for i := range 20 {
		reqs = append(reqs, Request{At: base.Add(time.Duration(20+i) * time.Millisecond), Kind: KindSQL,
			Query: fmt.Sprintf("SELECT item FROM orders WHERE id <= %d", i)})
	}
	reqs = append(reqs, Request{At: base.Add(time.Second), Query: "SELECT nope FROM missing_table"})
	var errs bytes.Buffer
	res, err := Run(context.Background(), Config{Mode: ModeOriginal, Speed: 10, Concurrency: 1, Executor: exec, Errors: &errs},
		NewReader(input(t, reqs), "sql.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 41 || res.Total.Errors != 1 {
		t.Fatalf("sent %d with %d errors, want 41 with 1", res.Sent, res.Total.Errors)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM orders").Scan(&n); err != nil || n != 20 {
		t.Errorf("orders has %d rows (%v), want 20", n, err)
	}
	apis := map[string]int64{}
	for _, a := range res.APIs {
		apis[a.API] = a.Count
	}
	if apis["insert"] != 20 || apis["SELECT orders"] != 20 || apis["SELECT missing_table"] != 1 {
		t.Errorf("per-API counts %v", apis)
	}
	if !strings.Contains(errs.String(), "missing_table") || !strings.Contains(errs.String(), `"error":"Error 1146`) {
		t.Errorf("errors.jsonl = %s", errs.String())
	}
}

func TestSQLRequestOnHTTPTargetFails(t *testing.T) {
	srv := newArrivals(t)
	exec, err := NewHTTPExecutor(srv.URL, ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	o := exec.Execute(context.Background(), &Request{Query: "SELECT 1"})
	if o.Err == nil || !strings.Contains(o.Err.Error(), `kind "sql"`) {
		t.Errorf("outcome %+v", o)
	}
}
