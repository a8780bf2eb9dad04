package e2e_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/wiretest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child))
	}
	goleak.VerifyTestMain(m)
}

const traces = 128

// clients are the downstream clients of the service: one pool each, shared
// by every request, as in a real service.
type clients struct {
	redis  *goredis.Client
	db     *sql.DB
	http   *http.Client
	base   string // URL of the HTTP downstream
	prefix string // Redis key prefix of this test
}

// work is one request of the service: Redis (commands and a pipeline),
// MySQL (a text query and a prepared one) and an HTTP downstream, with
// values unique to request i.
func (c *clients) work(ctx context.Context, i int) (string, error) {
	key := fmt.Sprintf("%s:%d", c.prefix, i)
	if err := c.redis.Set(ctx, key, fmt.Sprintf("v%d-%s", i, c.prefix), 0).Err(); err != nil {
		return "", fmt.Errorf("redis SET: %w", err)
	}
	var get *goredis.StringCmd
	var incr *goredis.IntCmd
	if _, err := c.redis.Pipelined(ctx, func(p goredis.Pipeliner) error {
		get = p.Get(ctx, key)
		incr = p.IncrBy(ctx, key+":n", int64(i))
		return nil
	}); err != nil {
		return "", fmt.Errorf("redis pipeline: %w", err)
	}
	var v1, v2 string
	if err := c.db.QueryRowContext(ctx, fmt.Sprintf("SELECT v FROM t WHERE id = %d", i+1)).Scan(&v1); err != nil {
		return "", fmt.Errorf("mysql text query: %w", err)
	}
	if err := c.db.QueryRowContext(ctx, "SELECT CONCAT(v, '#', ?) FROM t WHERE id = ?", i, i+1).Scan(&v2); err != nil {
		return "", fmt.Errorf("mysql prepared query: %w", err)
	}
	resp, err := c.http.Get(fmt.Sprintf("%s/items/%d", c.base, i))
	if err != nil {
		return "", fmt.Errorf("http: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		return "", fmt.Errorf("http: %s %s %v", resp.Status, resp.Header.Get("X-Retrace-Missing"), err)
	}
	return strings.Join([]string{get.Val(), strconv.FormatInt(incr.Val(), 10), v1, v2, string(body)}, "|"), nil
}

func (c *clients) close() {
	c.redis.Close()
	c.db.Close()
	c.http.CloseIdleConnections()
}

var netSeq int

func openDB(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error), dbName string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if dial != nil {
		netSeq++
		cfg.Net = fmt.Sprintf("retrace-e2e-%d", netSeq)
		mysql.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) })
	}
	cfg.DBName = dbName
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return db
}

func scratchDB(t *testing.T) string {
	t.Helper()
	db := openDB(t, nil, "")
	defer db.Close()
	name := "retrace_e2e_" + trace.NewID()[:8]
	for _, s := range []string{"CREATE DATABASE " + name, "CREATE TABLE " + name + ".t (id INT PRIMARY KEY, v VARCHAR(64))"} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= traces; i++ {
		if _, err := db.Exec("INSERT INTO "+name+".t VALUES (?, ?)", i, fmt.Sprintf("row%d-%s", i, trace.NewID()[:6])); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		db := openDB(t, nil, "")
		db.Exec("DROP DATABASE " + name)
		db.Close()
	})
	return name
}

// TestReplayThroughAgent records 128 requests with real Redis, MariaDB and
// an HTTP downstream, then replays them concurrently against a service
// running under the real agent in replay mode, with every downstream
// answered by the mock server (the HTTP downstream is gone by then).
func TestReplayThroughAgent(t *testing.T) {
	ctx := context.Background()
	redisAddr := testenv.RedisAddr(t)
	dbName := scratchDB(t)
	nonce := trace.NewID()[:8]
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s %s", r.URL.Path, trace.NewID()[:8])
	}))
	tid := func(i int) string { return fmt.Sprintf("e2e-%s-%d", nonce, i) }

	// Record: the same work, with byte-capturing dialers.
	rec := mocktest.NewRecorder()
	want := make([]string, traces)
	{
		c := &clients{prefix: "retrace-e2e-" + nonce, base: ds.URL,
			redis: goredis.NewClient(&goredis.Options{Addr: redisAddr, Dialer: rec.Dialer("redis", ""), PoolSize: 8}),
			db:    openDB(t, rec.Dialer("mysql", ""), dbName)}
		var wg sync.WaitGroup
		for i := range traces {
			wg.Go(func() {
				defer mocktest.Bind(tid(i))()
				// net/http writes on its own goroutine: record each trace's
				// HTTP on a transport of its own.
				hc := &http.Client{Transport: &http.Transport{DialContext: rec.Dialer("http", tid(i))}}
				defer hc.CloseIdleConnections()
				cc := *c
				cc.http = hc
				s, err := cc.work(ctx, i)
				if err != nil {
					t.Errorf("recording request %d: %v", i, err)
				}
				want[i] = s
			})
		}
		wg.Wait()
		c.redis.Close()
		c.db.Close()
	}
	ds.Close()
	if t.Failed() {
		return
	}

	srv := mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)
	replayThroughAgent(t, srv, redisAddr, dbName, "retrace-e2e-"+nonce, ds.URL, tid, want)
}

// newService returns the service under test: an HTTP handler doing work(i)
// for GET /work?i=N, with fresh client pools that dial the real addresses.
func newService(t *testing.T, redisAddr, dbName, prefix, base string) (*http.Server, *clients) {
	c := &clients{prefix: prefix, base: base,
		redis: goredis.NewClient(&goredis.Options{Addr: redisAddr, PoolSize: 8, MaxRetries: -1}),
		db:    openDB(t, nil, dbName),
		http:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}}
	return &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		s, err := c.work(r.Context(), i)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.WriteString(w, s)
	})}, c
}

// replayThroughAgent runs the service under the agent in replay mode with
// every downstream answered by srv, replays the 128 requests concurrently
// and checks they got their recorded answers.
func replayThroughAgent(t *testing.T, srv *mockserver.Server, redisAddr, dbName, prefix, base string, tid func(int) string, want []string) {
	t.Helper()
	sutLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sut, c := newService(t, redisAddr, dbName, prefix, base) // base is closed by now: the mock answers for it
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{sutLn.Addr().String(), strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	var serveWG sync.WaitGroup
	serveWG.Go(func() { sut.Serve(sutLn) })
	defer func() {
		sut.Close()
		serveWG.Wait()
		c.close()
		undo()
	}()
	got := wiretest.Drive(t, sutLn.Addr().String(), traces, func(i int) string { return "Retrace-Trace-Id: " + tid(i) })
	for i := range traces {
		if got[i] != want[i] {
			t.Errorf("request %d: replay answered %q, recorded %q", i, got[i], want[i])
		}
	}
	resp, err := http.Get(srv.AdminURL() + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	var missing []mockserver.MissingMock
	err = json.NewDecoder(resp.Body).Decode(&missing)
	resp.Body.Close()
	if err != nil || len(missing) != 0 {
		t.Errorf("missing mocks: %+v %v", missing, err)
	}
	// Every recorded call was used, and every live one matched.
	for i := range traces {
		resp, err := http.Get(srv.AdminURL() + "/traces/" + tid(i))
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
			if !oc.Setup && oc.Matched >= 0 {
				matched++
			}
		}
		if matched < 7 {
			t.Errorf("trace %d: %d calls matched, want at least 7 (SET, GET, INCRBY, 2 queries, HTTP)", i, matched)
		}
	}
}

// TestRecordAndReplayThroughAgent records with the real agent in record
// mode (recording/capture into a directory store), then replays through the
// agent in replay mode against the mock server loaded from that directory.
func TestRecordAndReplayThroughAgent(t *testing.T) {
	ctx := context.Background()
	redisAddr := testenv.RedisAddr(t)
	dbName := scratchDB(t)
	nonce := trace.NewID()[:8]
	prefix := "retrace-e2e-rec-" + nonce
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s %s", r.URL.Path, trace.NewID()[:8])
	}))
	tids := make([]string, traces)
	for i := range tids {
		tids[i] = trace.NewID()
	}
	// a request's session has an id of its own; the traceparent the
	// driver sent is its Trace (filled in once the recording is read)
	sessionOf := map[string]string{}
	tid := func(i int) string { return sessionOf[tids[i]] }

	dir := t.TempDir()
	store, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, err := recording.NewSampler(1)
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := capture.New(capture.Config{Pipeline: pipe, App: "e2e"})
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
	sut, c := newService(t, redisAddr, dbName, prefix, ds.URL)
	var serveWG sync.WaitGroup
	serveWG.Go(func() { sut.Serve(sutLn) })
	want := wiretest.Drive(t, sutLn.Addr().String(), traces, func(i int) string {
		return fmt.Sprintf("traceparent: 00-%s-%016x-01", tids[i], i+1)
	})
	sut.Close()
	serveWG.Wait()
	c.close()
	undo()
	ds.Close()
	if err := recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if !strings.HasPrefix(w, fmt.Sprintf("v%d-", i)) {
			t.Fatalf("recording request %d: %s", i, w)
		}
	}

	srv := mocktest.NewServer(t, mockserver.Config{})
	rd, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sutAddr := sutLn.Addr().String()
	n, err := srv.Load(ctx, func(ctx context.Context, fn func(*recording.Session) error) error {
		return rd.Scan(ctx, func(s *recording.Session) error {
			if s.Trace != "" && s.Inbound.Local == sutAddr {
				sessionOf[s.Trace] = s.ID
			}
			return fn(s)
		})
	})
	rd.Close()
	// The HTTP downstream runs in this process too: its requests are
	// sessions of their own (not needed here; the replay below checks that
	// every request's session is there).
	if err != nil || n < traces {
		t.Fatalf("loaded %d sessions (%v), want at least %d; recorder stats %+v", n, err, traces, recorder.Stats())
	}
	replayThroughAgent(t, srv, redisAddr, dbName, prefix, ds.URL, tid, want)
}
