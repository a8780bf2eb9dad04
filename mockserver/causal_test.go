package mockserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

// cancelledSibling is a request whose two goroutines race as in the orders
// example's errgroup: one sends a slow MySQL query, the other waits on Redis
// for an item that never comes (BLPOP times out with a null answer), which
// fails the request and cancels the query. Against the real servers the
// query is always sent (and never answered) long before Redis gives up.
func cancelledSibling(ctx context.Context, db *sql.DB, rdb *goredis.Client, tid string, id int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer mocktest.Bind(tid)()
		var v string
		return db.QueryRowContext(gctx, "SELECT CONCAT(v, SLEEP(?)) FROM t WHERE id = ?", 2, id).Scan(&v)
	})
	g.Go(func() error {
		defer mocktest.Bind(tid)()
		_, err := rdb.BLPop(gctx, time.Second, "retrace-mock-causal:"+tid).Result()
		if errors.Is(err, goredis.Nil) {
			return fmt.Errorf("nothing queued for %s: %w", tid, err)
		}
		return err
	})
	return g.Wait()
}

// TestCausalOrderKeepsCancelledCall replays requests whose recording holds
// a MySQL query that a sibling goroutine's failure cancelled after it was
// sent. The mock server answers Redis at once, so unless it holds that
// answer back until the trace has sent the query (as the recording shows),
// the replay cancels the query before sending it and the trace's downstream
// traffic differs from its recording: the failure end-to-end replays showed.
// Every trace must send exactly its recorded calls, matched within its own
// recording, with the same outcome.
func TestCausalOrderKeepsCancelledCall(t *testing.T) {
	const n = 32
	ctx := context.Background()
	dbName, _ := scratchDB(t, n)
	rec := mocktest.NewRecorder()
	realDB := mysqlDB(t, rec.Dialer("mysql", ""), dbName, n)
	realRedis := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t), Dialer: rec.Dialer("redis", ""),
		PoolSize: n, MaxRetries: -1, ReadTimeout: -1})
	t.Cleanup(func() { realRedis.Close() })
	tag := randHex(4)
	tids := make([]string, n)
	for i := range tids {
		tids[i] = fmt.Sprintf("causal-%d-%s", i, tag)
	}
	run := func(db *sql.DB, rdb *goredis.Client) []string {
		got := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := cancelledSibling(ctx, db, rdb, tids[i], i+1); err != nil {
					got[i] = err.Error()
				}
			})
		}
		wg.Wait()
		return got
	}
	want := run(realDB, realRedis)
	realDB.Close()
	realRedis.Close()
	byID := map[string]*recording.Session{}
	for _, s := range rec.Sessions() {
		byID[s.ID] = s
	}
	for i, tid := range tids {
		if !strings.HasPrefix(want[i], "nothing queued for "+tid) {
			t.Fatalf("recording %s: got %q, want the Redis failure", tid, want[i])
		}
		if s := byID[tid]; s == nil || len(executes(s)) != 1 {
			t.Fatalf("recording %s: want one MySQL execute sent before the cancellation, got session %+v", tid, s)
		}
	}

	srv := mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)
	d := &mocktest.Dialer{Mock: srv.Addr()}
	replayDB := mysqlDB(t, d.DialContext, dbName, n)
	replayRedis := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), n)
	for round := range 3 {
		if round > 0 {
			for _, tid := range tids {
				forget(t, srv, tid)
			}
		}
		got := run(replayDB, replayRedis)
		for i, tid := range tids {
			if got[i] != want[i] {
				t.Errorf("round %d, trace %s: replay got %q, recorded %q", round, tid, got[i], want[i])
			}
			r := report(t, srv, tid)
			if m := missesOf(r); len(m) > 0 {
				t.Errorf("round %d, trace %s: missing mocks %+v", round, tid, m)
			}
			for _, c := range r.Unused {
				if c.Proto == "mysql" && len(mysqlCmds(c.Request)) > 0 && mysqlCmds(c.Request)[0] != 0x19 {
					t.Errorf("round %d, trace %s: recorded MySQL call %d (command 0x%02x) never sent: the replay cancelled it first",
						round, tid, c.Seq, mysqlCmds(c.Request)[0])
				}
			}
			if r.Recording != tid {
				t.Errorf("round %d, trace %s: answered from recording %q", round, tid, r.Recording)
			}
		}
	}
}

// executes returns the MySQL COM_STMT_EXECUTE calls of s.
func executes(s *recording.Session) []recording.Call {
	var out []recording.Call
	for _, c := range s.Calls {
		if cmds := mysqlCmds(c.Request); c.Proto == "mysql" && !c.Setup && len(cmds) > 0 && cmds[len(cmds)-1] == 0x17 {
			out = append(out, c)
		}
	}
	return out
}

// mysqlCmds returns the command byte of every packet in a recorded request.
func mysqlCmds(b []byte) []byte {
	var out []byte
	for len(b) >= 5 {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if n == 0 || 4+n > len(b) {
			break
		}
		out = append(out, b[4])
		b = b[4+n:]
	}
	return out
}

// forget makes the mock server forget what trace tid consumed, so the
// recording can be replayed again under the same id.
func forget(t *testing.T, srv *mockserver.Server, tid string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, srv.AdminURL()+"/traces/"+tid, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE /traces/%s: %s", tid, resp.Status)
	}
}
