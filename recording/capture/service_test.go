package capture_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
)

// Every request of the fan-out service carries an id of this shape, and the
// service puts it into everything it sends downstream, so a recorded call
// names the request it belongs to.
var idPattern = regexp.MustCompile(`rq[0-9a-f]{16}`)

func newReqID() string { return "rq" + trace.NewID()[:16] }

// fanOut is an example-style service: each request fans out, from child
// goroutines and a grandchild, to Redis (a pipeline and a single command),
// MariaDB (prepared INSERT and SELECT through database/sql) and an HTTP
// downstream, all on pooled connections shared by concurrent requests.
type fanOut struct {
	rdb   *redis.Client
	db    *sql.DB
	hc    *http.Client
	down  string // URL of the HTTP downstream
	table string
}

func (f *fanOut) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	var out struct{ Redis, SQL, HTTP string }
	g, ctx := errgroup.WithContext(r.Context())
	g.Go(func() error {
		key := "capture-test:" + id
		pipe := f.rdb.Pipeline()
		pipe.Set(ctx, key, id, time.Minute)
		get := pipe.Get(ctx, key)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		n, err := f.rdb.StrLen(ctx, key).Result()
		if err != nil || n != int64(len(id)) {
			return fmt.Errorf("strlen %s: %d, %v", key, n, err)
		}
		out.Redis = get.Val()
		return nil
	})
	g.Go(func() error {
		if _, err := f.db.ExecContext(ctx, "INSERT INTO "+f.table+" (id, v) VALUES (?, ?) /* "+id+" */", id, "v-"+id); err != nil {
			return err
		}
		return f.db.QueryRowContext(ctx, "SELECT v FROM "+f.table+" WHERE id = ? /* "+id+" */", id).Scan(&out.SQL)
	})
	g.Go(func() error {
		done := make(chan error, 1)
		go func() { // a grandchild goroutine
			resp, err := f.hc.Get(f.down + "/echo?id=" + id)
			if err != nil {
				done <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			out.HTTP = string(b)
			done <- err
		}()
		return <-done
	})
	if err := g.Wait(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// newFanOut returns the service with its clients: Redis at redisAddr,
// MariaDB at dsn, the HTTP downstream at the URL down; it writes into table.
func newFanOut(redisAddr, dsn, down, table string) (*fanOut, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return &fanOut{
		rdb:   redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 8}),
		db:    db,
		hc:    &http.Client{Transport: &http.Transport{MaxConnsPerHost: 4, MaxIdleConnsPerHost: 4, TLSClientConfig: downTLS()}},
		down:  down,
		table: table,
	}, nil
}

func (f *fanOut) close() {
	f.rdb.Close()
	f.db.Close()
	f.hc.CloseIdleConnections()
}

// world is the service with its downstreams, recorded into a directory.
type world struct {
	addr  string
	rec   *capture.Recorder
	store *recording.DirStore
	svc   *fanOut
}

// startWorld installs the agent in record mode with the sampler (none when
// nil), then starts the service and its clients; the test's cleanups stop
// them in the reverse order.
func startWorld(tb testing.TB, sampler *recording.Sampler) *world {
	tb.Helper()
	redisAddr := testenv.RedisAddr(tb)
	dsn := testenv.MySQLDSN(tb)
	table := createTable(tb, dsn)

	w := &world{}
	if sampler != nil {
		w.rec, w.store = installRecorder(tb, "fanout", *sampler)
	}

	downAddr, _ := startChild(tb, "echo")
	svc, err := newFanOut(redisAddr, dsn, "http://"+downAddr, table)
	require.NoError(tb, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	srv := &http.Server{Handler: svc}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-served
		svc.close()
	})
	w.addr, w.svc = ln.Addr().String(), svc
	return w
}

// installRecorder installs the agent in record mode with a Recorder writing
// app's sessions to a directory store; the test's cleanup uninstalls it and
// closes the Recorder.
func installRecorder(tb testing.TB, app string, sampler recording.Sampler) (*capture.Recorder, *recording.DirStore) {
	tb.Helper()
	store, err := recording.NewDirStore(tb.TempDir())
	require.NoError(tb, err)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler, QueueSize: 1 << 14})
	require.NoError(tb, err)
	rec, err := capture.New(capture.Config{Pipeline: pipe, App: app})
	require.NoError(tb, err)
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	require.NoError(tb, err)
	tb.Cleanup(func() {
		undo()
		require.NoError(tb, rec.Close(context.Background()))
	})
	return rec, store
}

// createTable makes a table of its own in the test database (before the
// agent is installed) and drops it at the end.
func createTable(tb testing.TB, dsn string) string {
	tb.Helper()
	table, drop, err := tempTable(dsn)
	require.NoError(tb, err)
	tb.Cleanup(drop)
	return table
}

// tempTable makes a table of its own in the database of dsn, and returns
// how to drop it.
func tempTable(dsn string) (table string, drop func(), err error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", nil, err
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	// a MEMORY table's size is fixed when it is made; the default 16 MB
	// fills up after about 40,000 of these rows (long benchmark runs)
	cfg.Params["max_heap_table_size"] = "268435456"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", nil, err
	}
	defer db.Close()
	table = "capture_" + trace.NewID()[:12]
	if _, err = db.Exec("CREATE TABLE " + table + " (id VARCHAR(32) PRIMARY KEY, v VARCHAR(64)) ENGINE=MEMORY"); err != nil {
		return "", nil, err
	}
	return table, func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err == nil {
			_, _ = db.Exec("DROP TABLE " + table)
			db.Close()
		}
	}, nil
}

// settle waits until no session is in progress (the agent reports a
// response's last bytes after the client may already have read them), then
// flushes the recorder.
func settle(tb testing.TB, rec *capture.Recorder) {
	tb.Helper()
	require.Eventually(tb, func() bool { return rec.Stats().Active == 0 }, 30*time.Second, time.Millisecond,
		"sessions still in progress: %+v", rec.Stats())
	require.NoError(tb, rec.Flush(context.Background()))
}

// client sends requests to the service over keep-alive connections.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns}}
}

func get(c *http.Client, addr, id string) error {
	resp, err := c.Get("http://" + addr + "/work?id=" + id)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	want := fmt.Sprintf(`{"Redis":%q,"SQL":%q,"HTTP":%q}`, id, "v-"+id, "echo-"+id)
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != want {
		return fmt.Errorf("request %s: %d %s", id, resp.StatusCode, b)
	}
	return nil
}

// downTLS trusts the CA in fanOutCAEnv, for an HTTPS downstream; nil
// without it.
func downTLS() *tls.Config {
	file := os.Getenv(fanOutCAEnv)
	if file == "" {
		return nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		panic(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: roots}
}
