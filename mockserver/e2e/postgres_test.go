package e2e_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// pgClient is one way a service talks to PostgreSQL: a pgx pool in one
// query mode, pgx batches, or database/sql over lib/pq or pgx's stdlib.
type pgClient struct {
	name  string
	open  func(t *testing.T, url string) pgConn
	batch bool // the work sends its statements as one pgx Batch
	// features: the work uses COPY both ways, a pipeline of two syncs,
	// LISTEN/NOTIFY and a NOTICE
	features bool
	// reorder: the work makes two queries of one statement with other
	// values, in the other order on replay; the mock server matches them
	// with the sql strategy, by their parameters
	reorder bool
	// cancel: the work makes a query that its context's deadline cancels
	// (pg_sleep), then another on the same pool
	cancel bool
	traces int // concurrent traces, when not the default
}

// pgConn is what a request's work needs of a client.
type pgConn interface {
	// row runs one statement returning one row of text columns
	row(ctx context.Context, q string, args ...any) ([]string, error)
	// tx runs statements in one transaction
	tx(ctx context.Context, stmts [][]any) error
	ping(ctx context.Context) error
	close()
}

var pgClients = []pgClient{
	{name: "pgx_cache_statement", open: pgxOpen(pgx.QueryExecModeCacheStatement)},
	{name: "pgx_cache_describe", open: pgxOpen(pgx.QueryExecModeCacheDescribe)},
	{name: "pgx_describe_exec", open: pgxOpen(pgx.QueryExecModeDescribeExec)},
	{name: "pgx_exec", open: pgxOpen(pgx.QueryExecModeExec)},
	{name: "pgx_simple_protocol", open: pgxOpen(pgx.QueryExecModeSimpleProtocol)},
	{name: "pgx_batch", open: pgxOpen(pgx.QueryExecModeCacheStatement), batch: true},
	{name: "lib_pq", open: sqlOpen("postgres")},
	{name: "pgx_stdlib", open: sqlOpen("pgx")},
	{name: "pgx_protocol", open: pgxOpen(pgx.QueryExecModeCacheStatement), features: true},
	{name: "pgx_sql_strategy", open: pgxOpen(pgx.QueryExecModeCacheStatement), reorder: true},
}

// pgCancelClients are the clients whose cancelled queries send a
// CancelRequest on a connection of its own: pgx with its
// CancelRequestContextWatcherHandler (pgx's default only sets the
// connection's deadline), lib/pq (its default).
var pgCancelClients = []pgClient{
	{name: "pgx_cancel_request", open: pgxOpenWith(pgx.QueryExecModeCacheStatement, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
		}
	}), cancel: true, traces: pgCancelTraces},
	{name: "lib_pq_cancel", open: sqlOpen("postgres"), cancel: true, traces: pgCancelTraces},
}

// pgCancelTraces is how many requests a cancel test sends at once: each
// holds a connection of the pool until its deadline.
const pgCancelTraces = 48

// pgPoolSize is small against 128 concurrent traces: every connection
// serves many traces, and statements one trace prepared are reused by
// others.
const pgPoolSize = 6

func pgxOpen(mode pgx.QueryExecMode) func(t *testing.T, url string) pgConn {
	return pgxOpenWith(mode, nil)
}

// pgxOpenWith opens a pool in query mode mode, its configuration changed
// by edit when not nil.
func pgxOpenWith(mode pgx.QueryExecMode, edit func(*pgxpool.Config)) func(t *testing.T, url string) pgConn {
	return func(t *testing.T, url string) pgConn {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = pgPoolSize
		cfg.ConnConfig.DefaultQueryExecMode = mode
		if edit != nil {
			edit(cfg)
		}
		c := pgxConn{notices: &sync.Map{}}
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { c.notices.Store(n.Message, true) }
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.p = p
		return c
	}
}

type pgxConn struct {
	p       *pgxpool.Pool
	notices *sync.Map // messages of the notices received
}

func (c pgxConn) row(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := c.p.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collectText(rows)
}

func collectText(rows pgx.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			out = append(out, fmt.Sprint(v))
		}
	}
	return out, rows.Err()
}

func (c pgxConn) tx(ctx context.Context, stmts [][]any) error {
	return pgx.BeginFunc(ctx, c.p, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s[0].(string), s[1:]...); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c pgxConn) ping(ctx context.Context) error { return c.p.Ping(ctx) }
func (c pgxConn) close()                         { c.p.Close() }

// sendBatch runs the statements as one pgx Batch and returns the first
// column of each result row.
func (c pgxConn) sendBatch(ctx context.Context, stmts [][]any) ([]string, error) {
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s[0].(string), s[1:]...)
	}
	br := c.p.SendBatch(ctx, b)
	var out []string
	for range stmts {
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return nil, err
		}
		vals, err := collectText(rows)
		if err != nil {
			br.Close()
			return nil, err
		}
		out = append(out, vals...)
	}
	return out, br.Close()
}

func sqlOpen(driver string) func(t *testing.T, url string) pgConn {
	return func(t *testing.T, url string) pgConn {
		db, err := sql.Open(driver, url)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(pgPoolSize)
		db.SetMaxIdleConns(pgPoolSize)
		return sqlConn{db}
	}
}

type sqlConn struct{ db *sql.DB }

func (c sqlConn) row(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := c.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for _, v := range vals {
			out = append(out, v.String)
		}
	}
	return out, rows.Err()
}

func (c sqlConn) tx(ctx context.Context, stmts [][]any) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s[0].(string), s[1:]...); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

func (c sqlConn) ping(ctx context.Context) error { return c.db.PingContext(ctx) }
func (c sqlConn) close()                         { c.db.Close() }

var _ = stdlib.GetDefaultDriver // registers "pgx" with database/sql
var _ = pq.Driver{}             // registers "postgres"

// pgWork is one request of the service: an insert of values of many
// types unique to request i, a transaction updating the row, and a query
// reading it back with typed parameters.
func pgWork(ctx context.Context, c pgConn, batch, features bool, table string, i int, nonce string) (string, error) {
	id := i + 1
	name := fmt.Sprintf("n%d-%s", i, nonce)
	day := time.Date(2026, 1, 1+i%28, 0, 0, 0, 0, time.UTC)
	at := time.Date(2026, 11, 30, 10, i%60, 7, 123456000, time.UTC)
	doc := fmt.Sprintf(`{"i":%d,"nonce":%q}`, i, nonce)
	uuid := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	insert := []any{"INSERT INTO " + table + " (id, name, amount, ok, data, u, doc, day, at, tags) VALUES ($1, $2, $3::numeric, $4, $5, $6::uuid, $7::jsonb, $8, $9, $10)",
		id, name, fmt.Sprintf("%d.25", i), i%2 == 0, []byte{byte(i), 0xff}, uuid, doc, day, at, []int32{int32(i), int32(i * 2)}}
	read := "SELECT name, amount::text, ok::text, encode(data, 'hex'), u::text, doc->>'nonce', day::text, tags::text, n::text FROM " + table + " WHERE id = $1 AND name = $2"
	if features {
		return pgFeatures(ctx, c.(pgxConn), table, id, name)
	}
	if batch {
		pc := c.(pgxConn)
		got, err := pc.sendBatch(ctx, [][]any{insert, {"UPDATE " + table + " SET n = n + $2 WHERE id = $1", id, 3}, {read, id, name}})
		return strings.Join(got, "|"), err
	}
	if err := c.tx(ctx, [][]any{insert, {"UPDATE " + table + " SET n = n + $2 WHERE id = $1", id, 5}}); err != nil {
		return "", fmt.Errorf("transaction: %w", err)
	}
	got, err := c.row(ctx, read, id, name)
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	// an error the application handles: a duplicate key
	_, dupErr := c.row(ctx, "INSERT INTO "+table+" (id, name) VALUES ($1, $2) RETURNING id", id, "dup")
	return strings.Join(got, "|") + "|" + pgErrCode(dupErr), nil
}

// pgFeatures is the work of a request that uses what the protocol has
// beyond queries, on one connection of the pool: COPY FROM STDIN (pgx's
// binary CopyFrom, which describes the table first), COPY TO STDOUT, a
// pipeline of three queries and two syncs, LISTEN and a notification to
// itself, and a NOTICE raised by a DO block.
func pgFeatures(ctx context.Context, c pgxConn, table string, id int, name string) (string, error) {
	conn, err := c.p.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	pc := conn.Conn().PgConn()
	var out []string
	n, err := conn.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "name"},
		pgx.CopyFromRows([][]any{{id, name}, {id + 10000, name + "-b"}}))
	if err != nil {
		return "", fmt.Errorf("copy from: %w", err)
	}
	out = append(out, name, strconv.FormatInt(n, 10))
	var buf strings.Builder
	if _, err := pc.CopyTo(ctx, &buf, fmt.Sprintf("COPY (SELECT id, name FROM %s WHERE id IN (%d, %d) ORDER BY id) TO STDOUT", table, id, id+10000)); err != nil {
		return "", fmt.Errorf("copy to: %w", err)
	}
	out = append(out, strings.ReplaceAll(buf.String(), "\n", ";"))
	p := pc.StartPipeline(ctx)
	p.SendQueryParams("SELECT $1::int + 1", [][]byte{[]byte(strconv.Itoa(id))}, nil, nil, nil)
	p.SendQueryParams("SELECT upper($1::text)", [][]byte{[]byte(name)}, nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("SELECT count(*) FROM "+table+" WHERE id = $1", [][]byte{[]byte(strconv.Itoa(id))}, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		return "", fmt.Errorf("pipeline: %w", err)
	}
	for syncs := 0; syncs < 2; {
		res, err := p.GetResults()
		if err != nil {
			return "", fmt.Errorf("pipeline results: %w", err)
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			got := r.Read()
			if got.Err != nil {
				return "", got.Err
			}
			for _, row := range got.Rows {
				out = append(out, string(row[0]))
			}
		case *pgconn.PipelineSync:
			syncs++
		}
	}
	if err := p.Close(); err != nil {
		return "", fmt.Errorf("pipeline close: %w", err)
	}
	ch := fmt.Sprintf("ch_%d", id)
	if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", ch, name); err != nil {
		return "", fmt.Errorf("notify: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	note, err := conn.Conn().WaitForNotification(wctx)
	cancel()
	if err != nil {
		return "", fmt.Errorf("waiting for the notification: %w", err)
	}
	if _, err := conn.Exec(ctx, "UNLISTEN "+ch); err != nil {
		return "", fmt.Errorf("unlisten: %w", err)
	}
	out = append(out, note.Channel+"="+note.Payload)
	msg := "notice " + name
	if _, err := conn.Exec(ctx, fmt.Sprintf("DO $$ BEGIN RAISE NOTICE '%s'; END $$", msg)); err != nil {
		return "", fmt.Errorf("notice: %w", err)
	}
	_, noticed := c.notices.LoadAndDelete(msg)
	out = append(out, "noticed "+strconv.FormatBool(noticed))
	return strings.Join(out, "|"), nil
}

// pgCancelWait is how long a cancelled query runs before its context's
// deadline cancels it.
const pgCancelWait = 150 * time.Millisecond

// pgCancelled makes a query that runs until its context's deadline
// cancels it, and says what the client saw: the error's SQLSTATE and
// whether the deadline had passed when the error came back (a server, or
// a mock, that answered before the client cancelled shows false). Then
// the pool serves another query.
func pgCancelled(ctx context.Context, c pgConn, i int) (string, error) {
	// the deadline starts once the pool gave a connection
	var run func(ctx context.Context) error
	var release func()
	const q = "SELECT pg_sleep(5)::text || $1::int::text"
	switch c := c.(type) {
	case pgxConn:
		conn, err := c.p.Acquire(ctx)
		if err != nil {
			return "", err
		}
		release = conn.Release
		run = func(ctx context.Context) error {
			rows, err := conn.Query(ctx, q, i)
			if err != nil {
				return err
			}
			_, err = collectText(rows)
			return err
		}
	case sqlConn:
		conn, err := c.db.Conn(ctx)
		if err != nil {
			return "", err
		}
		release = func() { conn.Close() }
		run = func(ctx context.Context) error {
			rows, err := conn.QueryContext(ctx, q, i)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			rows.Close()
			return rows.Err()
		}
	}
	qctx, cancel := context.WithTimeout(ctx, pgCancelWait)
	err := run(qctx)
	late := qctx.Err() != nil
	cancel()
	release() // pgx: back to the pool; lib/pq: closed, the cancel broke it
	if err == nil {
		return "", fmt.Errorf("query %d was not cancelled", i)
	}
	code := pgErrCode(err)
	if errors.Is(err, context.DeadlineExceeded) {
		code = "deadline exceeded"
	}
	row, err := c.row(ctx, "SELECT $1::int + 1", i)
	if err != nil {
		return "", fmt.Errorf("query after the cancelled one: %w", err)
	}
	return fmt.Sprintf("%d|%s|after deadline %v|%s", i, code, late, strings.Join(row, ",")), nil
}

// pgReordered makes two queries of one statement, the second first when
// replaying.
func pgReordered(ctx context.Context, c pgConn, i int, replay bool) (string, error) {
	args := []int{i, i + 1}
	if replay {
		args[0], args[1] = args[1], args[0]
	}
	got := map[int]string{}
	for _, a := range args {
		row, err := c.row(ctx, "SELECT $1::int * 10 - $2::int", a, 3*(a-i))
		if err != nil {
			return "", err
		}
		got[a] = strings.Join(row, ",")
	}
	return got[i] + "|" + got[i+1], nil
}

func summarizeCall(b []byte) string {
	d, ok := postgres.DecodeRequest(b, nil)
	if !ok {
		return fmt.Sprintf("%q", b[:min(len(b), 80)])
	}
	if len(d.Text) > 160 {
		return d.Text[:160]
	}
	return d.Text
}

func pgErrCode(err error) string {
	if err == nil {
		return "no error"
	}
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		return pe.SQLState()
	}
	return err.Error()
}

// pgProxy forwards a loopback port to PostgreSQL until the returned stop
// is called: recorded through it, the service's PostgreSQL is gone once
// stopped, which is how replay must run.
func pgProxy(t *testing.T, target string) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Go(func() { io.Copy(u, c); u.Close() })
			wg.Go(func() { io.Copy(c, u); c.Close() })
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// pgScratch creates a table for one test and returns its name.
func pgScratch(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "retrace_pg_" + strings.ToLower(trace.NewID()[:10])
	if _, err := conn.Exec(ctx, "CREATE TABLE "+name+` (id int PRIMARY KEY, name text NOT NULL, amount numeric(12,2),
		ok bool, data bytea, u uuid, doc jsonb, day date, at timestamptz, tags int[], n int NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), url)
		if err == nil {
			conn.Exec(context.Background(), "DROP TABLE "+name)
			conn.Close(context.Background())
		}
	})
	return name
}

// pgService is the service under test: GET /work?i=N runs pgWork; it
// pings PostgreSQL when it starts, as many services do.
func pgService(t *testing.T, cl pgClient, url, table, nonce string, replay bool) (*http.Server, pgConn) {
	t.Helper()
	c := cl.open(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ping(ctx); err != nil {
		c.close()
		t.Fatalf("%s: pinging PostgreSQL at start-up: %v", cl.name, err)
	}
	return &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		var s string
		var err error
		if cl.reorder {
			s, err = pgReordered(r.Context(), c, i, replay)
		} else if cl.cancel {
			s, err = pgCancelled(r.Context(), c, i)
		} else {
			s, err = pgWork(r.Context(), c, cl.batch, cl.features, table, i, nonce)
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.WriteString(w, s)
	})}, c
}

// TestPostgresRecordAndReplay records 128 concurrent requests of a
// service using PostgreSQL with the real agent in record mode, for every
// client and query mode, then replays them concurrently through the agent
// in replay mode with every PostgreSQL connection answered by the mock
// server (the PostgreSQL the service recorded with is gone): every
// request gets exactly its own recorded answer.
func TestPostgresRecordAndReplay(t *testing.T) {
	realURL := testenv.PostgresURL(t)
	for _, cl := range pgClients {
		t.Run(cl.name, func(t *testing.T) { pgRecordAndReplay(t, cl, realURL) })
	}
}

// pgRecordAndReplay records and replays cl's work against the database
// of realURL and returns the recording's directory.
func pgRecordAndReplay(t *testing.T, cl pgClient, realURL string) string {
	ctx := context.Background()
	traces := traces
	if cl.traces > 0 {
		traces = cl.traces
	}
	table := pgScratch(t, realURL)
	nonce := trace.NewID()[:8]
	u, err := urlWithHost(realURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, stopPG := pgProxy(t, u.host)
	url := u.with(proxy)
	tids := make([]string, traces)
	for i := range tids {
		tids[i] = trace.NewID()
	}

	dir := t.TempDir()
	store, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := capture.New(capture.Config{Pipeline: pipe, App: "pg-e2e"})
	if err != nil {
		t.Fatal(err)
	}
	sutLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: recorder})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	sut, c := pgService(t, cl, url, table, nonce, false)
	var serveWG sync.WaitGroup
	serveWG.Go(func() { sut.Serve(sutLn) })
	want := wiretest.Drive(t, sutLn.Addr().String(), traces, func(i int) string {
		return fmt.Sprintf("traceparent: 00-%s-%016x-01", tids[i], i+1)
	})
	sut.Close()
	serveWG.Wait()
	c.close()
	// every goroutine running patched code ends before the patches go:
	// unpatching rewrites the code they run
	stopPG()
	undo()
	if err := recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded answer of request 1: %s", want[1])
	for i, w := range want {
		if cl.reorder {
			if w != fmt.Sprintf("%d|%d", 10*i, 10*i+7) {
				t.Fatalf("recording request %d: %s", i, w)
			}
			continue
		}
		if cl.cancel {
			// the server cancelled the query (query_canceled) once the
			// client asked, after the deadline; or the client gave up
			// first (lib/pq when it read the rows after the deadline, pgx
			// when the cancel reached the server before the query)
			if w != fmt.Sprintf("%d|57014|after deadline true|%d", i, i+1) && w != fmt.Sprintf("%d|deadline exceeded|after deadline true|%d", i, i+1) {
				t.Fatalf("recording request %d: %s", i, w)
			}
			continue
		}
		if !strings.HasPrefix(w, fmt.Sprintf("n%d-%s|", i, nonce)) || !cl.batch && !cl.features && !strings.HasSuffix(w, "|23505") ||
			cl.features && !strings.HasSuffix(w, "|noticed true") {
			t.Fatalf("recording request %d: %s", i, w)
		}
	}

	var mcfg mockserver.Config
	if cl.reorder {
		mcfg.Strategies = []mockserver.Strategy{mockserver.StrategySQL}
	}
	srv := mocktest.NewServer(t, mcfg)
	rd, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	// a session's id is its own; the traceparent's trace id the driver
	// sent is its Trace
	sessionOf := map[string]string{}
	n, err := srv.Load(ctx, func(ctx context.Context, fn func(*recording.Session) error) error {
		return rd.Scan(ctx, func(s *recording.Session) error {
			if s.Trace != "" {
				sessionOf[s.Trace] = s.ID
			}
			return fn(s)
		})
	})
	rd.Close()
	if err != nil || n < traces {
		t.Fatalf("loaded %d sessions (%v), want %d; recorder stats %+v", n, err, traces, recorder.Stats())
	}
	for i := range tids {
		if tids[i] = sessionOf[tids[i]]; tids[i] == "" {
			t.Fatalf("request %d: no session has its traceparent's trace id", i)
		}
	}

	// Replay: a fresh service (its start-up ping answered by the mock
	// server), the agent redirecting every connection to the mock server.
	sutLn, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err = hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{sutLn.Addr().String(), strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	sut, c = pgService(t, cl, url, table, nonce, true)
	serveWG.Go(func() { sut.Serve(sutLn) })
	got := wiretest.Drive(t, sutLn.Addr().String(), traces, func(i int) string { return "Retrace-Trace-Id: " + tids[i] })
	sut.Close()
	serveWG.Wait()
	c.close()
	defer undo() // after srv.Close below: see the record phase
	defer srv.Close()
	failed := 0
	for i := range traces {
		if got[i] != want[i] {
			failed++
			if failed <= 5 {
				t.Errorf("request %d: replay answered %q, recorded %q", i, got[i], want[i])
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d sessions failed", failed, traces)
		rd, _ := recording.Open(ctx, dir)
		rd.Scan(ctx, func(s *recording.Session) error {
			for i := range traces {
				if s.ID == tids[i] && got[i] != want[i] {
					for _, c := range s.Calls {
						t.Logf("request %d recorded call %d setup=%v conn=%d: %s", i, c.Seq, c.Setup, c.Conn, summarizeCall(c.Request))
					}
				}
			}
			return nil
		})
		rd.Close()
	}
	resp, err := http.Get(srv.AdminURL() + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	var missing []mockserver.MissingMock
	err = json.NewDecoder(resp.Body).Decode(&missing)
	resp.Body.Close()
	if err != nil || len(missing) != 0 {
		for i, m := range missing {
			if i < 5 {
				t.Errorf("missing mock: trace %s %s: %s (%q)", m.Trace, m.Dst, m.Reason, m.Request)
			}
		}
		t.Errorf("%d missing mocks (%v)", len(missing), err)
	}
	// Every request's PostgreSQL calls were answered from its own
	// recording: as many as it recorded, each matched.
	for i := range traces {
		resp, err := http.Get(srv.AdminURL() + "/traces/" + tids[i])
		if err != nil {
			t.Fatal(err)
		}
		var r mockserver.TraceReport
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		matched := 0
		for _, oc := range r.Calls {
			if oc.Proto == "postgres" && !oc.Setup && oc.Matched >= 0 {
				matched++
			}
		}
		// a batch is one unit (its binds and executes up to one Sync), and
		// its prepares when this trace's connection had not made them; the
		// other work makes BEGIN, INSERT, UPDATE, COMMIT, SELECT, INSERT
		if want := 6; cl.batch && matched < 1 || (cl.reorder || cl.cancel) && matched < 2 || !cl.batch && !cl.reorder && !cl.cancel && matched < want {
			t.Errorf("trace %d: %d PostgreSQL calls matched from its recording", i, matched)
		}
	}
	return dir
}

// pgURL is a PostgreSQL URL whose host can be replaced.
type pgURL struct{ before, host, after string }

func urlWithHost(u string) (pgURL, error) {
	at := strings.Index(u, "@")
	if at < 0 {
		return pgURL{}, fmt.Errorf("PostgreSQL URL %q has no host after '@'", u)
	}
	rest := u[at+1:]
	slash := strings.IndexAny(rest, "/?")
	if slash < 0 {
		slash = len(rest)
	}
	return pgURL{before: u[:at+1], host: rest[:slash], after: rest[slash:]}, nil
}

func (u pgURL) with(host string) string { return u.before + host + u.after }

// TestPostgresBootsWithoutRecordings starts services that ping
// PostgreSQL at start-up (pgxpool and database/sql over lib/pq and pgx
// stdlib) in replay mode against a mock server that has no recording at
// all: the start-up and the ping are answered by the mock server, and an
// untraced query gets PostgreSQL's error at once.
func TestPostgresBootsWithoutRecordings(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{})
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	defer undo()
	defer srv.Close() // first: no mock connection runs patched code while the patches go
	// nothing listens there: only the mock server can answer
	const url = "postgres://app:secret@127.0.0.1:1/appdb?sslmode=prefer"
	for _, cl := range []pgClient{pgClients[0], pgClients[6], pgClients[7]} {
		t.Run(cl.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := cl.open(t, url)
			defer c.close()
			if err := c.ping(ctx); err != nil {
				t.Fatalf("start-up ping: %v", err)
			}
			_, err := c.row(ctx, "SELECT count(*) FROM orders")
			if code := pgErrCode(err); code != "XX000" {
				t.Fatalf("untraced query: %v (SQLSTATE %s), want the mock server's error XX000", err, code)
			}
			if !strings.Contains(err.Error(), "retrace") {
				t.Errorf("the error does not say who answered: %v", err)
			}
		})
	}
}

// TestPostgresTLSRecordAndReplay records a service whose PostgreSQL user
// must connect over TLS (sslmode=require, and verify-full against the
// test CA), for pgx, lib/pq and pgx's stdlib, 128 concurrent traces: the
// recording holds the queries in plaintext marked "tls", the SSLRequest
// answered 'S'; replayed with PostgreSQL stopped, the mock answers the
// SSLRequest 'S' as the recording did, the agent completes each
// client's TLS handshake without TLS (no certificate at the mock, none
// verified) and every request gets exactly its own answers.
func TestPostgresTLSRecordAndReplay(t *testing.T) {
	base, ca := testenv.PostgresTLSURL(t)
	modes := []struct{ name, query string }{
		{"require", "?sslmode=require"},
		{"verify_full", "?sslmode=verify-full&sslrootcert=" + ca},
	}
	for _, m := range modes {
		for _, cl := range []pgClient{pgClients[0], pgClients[4], pgClients[5], pgClients[6], pgClients[7]} {
			t.Run(m.name+"/"+cl.name, func(t *testing.T) {
				dir := pgRecordAndReplay(t, cl, base+m.query)
				pgCheckTLSRecording(t, dir)
			})
		}
	}
}

// pgCheckTLSRecording checks that every PostgreSQL connection of the
// recording in dir started with an SSLRequest answered 'S' and that the
// calls after it are marked TLS, in plaintext.
func pgCheckTLSRecording(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	rd, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ssl, plain, tlsCalls, queries := 0, 0, 0, 0
	err = rd.Scan(ctx, func(s *recording.Session) error {
		for _, c := range s.Calls {
			if c.Proto != "postgres" {
				continue
			}
			m, n, err := postgres.Next(c.Request, true, true, 0)
			switch {
			case err == nil && n > 0 && m.Type == 0 && m.Code == postgres.SSLRequestCode:
				if string(c.Response) != "S" {
					t.Errorf("session %s call %d: SSLRequest answered %q, want S", s.ID, c.Seq, c.Response)
				}
				if c.TLS.On {
					t.Errorf("session %s call %d: the SSLRequest, sent before TLS, is marked tls", s.ID, c.Seq)
				}
				ssl++
			case c.TLS.On:
				tlsCalls++
				if !c.Setup {
					queries++
				}
			default:
				plain++
				t.Errorf("session %s call %d: not marked tls: %s", s.ID, c.Seq, summarizeCall(c.Request))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ssl == 0 || queries < traces || plain > 0 {
		t.Fatalf("recording: %d SSLRequests, %d calls over TLS (%d queries), %d plaintext calls", ssl, tlsCalls, queries, plain)
	}
	t.Logf("recording: %d SSLRequests, %d calls over TLS (%d queries)", ssl, tlsCalls, queries)
}

// TestPostgresCancelRequest records requests whose query is cancelled by
// its context's deadline while PostgreSQL runs it (pg_sleep): the client
// sends a CancelRequest on a connection of its own, the server answers
// the query with query_canceled. Replayed with PostgreSQL stopped, the
// mock server holds that recorded answer until the client's
// CancelRequest for the connection's backend key arrives, as the server
// did: every request sees the same error after the same deadline, and
// its next query on the pool succeeds. pgx and lib/pq, plain and over TLS.
func TestPostgresCancelRequest(t *testing.T) {
	realURL := testenv.PostgresURL(t)
	tlsURL, _ := testenv.PostgresTLSURL(t)
	for _, cl := range pgCancelClients {
		t.Run(cl.name, func(t *testing.T) { pgRecordAndReplay(t, cl, realURL) })
		t.Run(cl.name+"_tls", func(t *testing.T) { pgRecordAndReplay(t, cl, tlsURL+"?sslmode=require") })
	}
}
